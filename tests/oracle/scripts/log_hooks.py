"""`self.log` in every hook of Lightning's table (its `_FxValidator.functions`), from the module and
from a callback (`pl_module.log`), with the default options and with `on_step=True`,
`on_epoch=False` and `on_epoch=True`: per call whether it raised (a `MisconfigurationException` or
what else, and the message), and what `callback_metrics`, `logged_metrics` and the progress bar
hold after each stage, and the CSVLogger's rows.

Argument: one JSON object: "stages" (in order: "fit", "validate", "test", "predict", "resume": a
second fit from the first fit's last checkpoint), "raise" (training_step raises at its second
batch: `on_exception`'s logging), "trainer" (more Trainer arguments)."""

import csv
import glob
import json
import sys

import lightning as L
import record
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ARGS = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
VARIANTS = {"d": {}, "s": {"on_step": True}, "f": {"on_epoch": False}, "e": {"on_epoch": True}}
CALLS: dict[str, int] = {}
OUTCOMES: dict[str, list] = {}


class Stop(Exception):
    pass


def try_log(module, who, hook):
    """Log under each variant; record each distinct outcome once, in order."""
    for variant, options in VARIANTS.items():
        key = f"{who}_{hook}_{variant}"
        CALLS[key] = CALLS.get(key, 0) + 1
        try:
            module.log(key, float(CALLS[key]), **options)
            outcome = None
        except Exception as err:  # what each framework says
            kind = "Misconfiguration" if isinstance(err, MisconfigurationException) else type(err).__name__
            # (surge words the `on_step=False, on_epoch=False` refusal its own way: log_refusals.py)
            outcome = [kind, "is not useful" if "is not useful" in str(err) else str(err)]
        seen = OUTCOMES.setdefault(key, [])
        if outcome not in seen:
            seen.append(outcome)
            record.append("order", [key, outcome])


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g))


def _module_hook(name, super_call=False):
    def hook(self, *args, **kwargs):
        try_log(self, "M", name)
        if super_call:
            return getattr(L.LightningModule, name)(self, *args, **kwargs)
        return None

    return hook


def _callback_hook(name):
    def hook(self, trainer, pl_module, *args, **kwargs):
        try_log(pl_module, "C", name)

    return hook


class Probe(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        try_log(self, "M", "training_step")
        if ARGS.get("raise") and batch_idx == 1:
            raise Stop("stop here")
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        try_log(self, "M", "validation_step")

    def test_step(self, batch, batch_idx):
        try_log(self, "M", "test_step")

    def predict_step(self, batch, batch_idx):
        try_log(self, "M", "predict_step")
        return self.net(batch[0])

    def backward(self, loss, *args, **kwargs):
        try_log(self, "M", "backward")
        loss.backward()

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
        try_log(self, "M", "optimizer_step")
        optimizer.step(closure=optimizer_closure)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        try_log(self, "M", "configure_gradient_clipping")

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        try_log(self, "M", "optimizer_zero_grad")
        optimizer.zero_grad()

    def lr_scheduler_step(self, scheduler, metric):
        try_log(self, "M", "lr_scheduler_step")
        scheduler.step()

    def configure_optimizers(self):
        try_log(self, "M", "configure_optimizers")
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1)}

    def configure_model(self):
        try_log(self, "M", "configure_model")

    def configure_callbacks(self):
        try_log(self, "M", "configure_callbacks")
        return []

    def prepare_data(self):
        try_log(self, "M", "prepare_data")

    def train_dataloader(self):
        try_log(self, "M", "train_dataloader")
        return DataLoader(data(8, 1), batch_size=4)

    def val_dataloader(self):
        try_log(self, "M", "val_dataloader")
        return DataLoader(data(4, 2), batch_size=2)

    def test_dataloader(self):
        try_log(self, "M", "test_dataloader")
        return DataLoader(data(4, 3), batch_size=2)

    def predict_dataloader(self):
        return DataLoader(data(4, 4), batch_size=2)

    def on_save_checkpoint(self, checkpoint):
        try_log(self, "M", "on_save_checkpoint")

    def on_load_checkpoint(self, checkpoint):
        try_log(self, "M", "on_load_checkpoint")


MODULE_HOOKS = [
    "on_before_backward", "on_after_backward", "on_before_optimizer_step", "on_before_zero_grad",
    "on_fit_start", "on_fit_end", "on_train_start", "on_train_end", "on_validation_start",
    "on_validation_end", "on_test_start", "on_test_end", "on_predict_start", "on_predict_end",
    "on_train_epoch_start", "on_train_epoch_end", "on_validation_epoch_start", "on_validation_epoch_end",
    "on_test_epoch_start", "on_test_epoch_end", "on_predict_epoch_start", "on_predict_epoch_end",
    "on_train_batch_start", "on_train_batch_end", "on_validation_batch_start", "on_validation_batch_end",
    "on_test_batch_start", "on_test_batch_end", "on_predict_batch_start", "on_predict_batch_end",
    "setup", "teardown",
]  # fmt: skip
SUPER_HOOKS = [
    "on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer",
    "on_validation_model_zero_grad", "on_validation_model_eval", "on_test_model_eval",
    "on_validation_model_train", "on_test_model_train",
]  # fmt: skip
CALLBACK_HOOKS = [
    *(h for h in MODULE_HOOKS), "on_sanity_check_start", "on_sanity_check_end", "on_exception",
    "on_save_checkpoint", "on_load_checkpoint",
]  # fmt: skip
for _name in MODULE_HOOKS:
    setattr(Probe, _name, _module_hook(_name))
for _name in SUPER_HOOKS:
    setattr(Probe, _name, _module_hook(_name, super_call=True))


class Logs(Callback):
    def state_dict(self):
        try_log(self.module, "C", "state_dict")
        return {"x": 1}

    def load_state_dict(self, state_dict):
        try_log(self.module, "C", "load_state_dict")

    def setup(self, trainer, pl_module, stage):
        self.module = pl_module
        try_log(pl_module, "C", "setup")


for _name in CALLBACK_HOOKS:
    if _name != "setup":
        setattr(Logs, _name, _callback_hook(_name))


def shown(trainer, at):
    record.put(
        f"after {at}",
        {
            "callback": record.metrics(trainer),
            "logged": {k: record.plain(v) for k, v in sorted(trainer.logged_metrics.items())},
            "bar": {k: record.plain(v) for k, v in sorted(trainer.progress_bar_metrics.items())},
        },
    )


def trainer(name, **more):
    options = {
        "accelerator": "cpu", "devices": 1, "max_epochs": 1, "limit_train_batches": 2, "limit_val_batches": 1,
        "num_sanity_val_steps": 1, "log_every_n_steps": 1, "logger": CSVLogger(".", name=name),
        "enable_progress_bar": False, "enable_model_summary": False, "default_root_dir": ".",
        "callbacks": [Logs()], **ARGS.get("trainer", {}), **more,
    }  # fmt: skip
    return L.Trainer(**options)


def main():
    L.seed_everything(0)
    model = Probe()
    first = trainer("csv")
    for stage in ARGS.get("stages", ["fit"]):
        record.append("order", [f"stage {stage}"])
        if stage == "fit":
            try:
                first.fit(model)
            except Stop:
                record.append("order", ["stopped"])
        elif stage == "validate":
            first.validate(model, verbose=False)
        elif stage == "test":
            first.test(model, verbose=False)
        elif stage == "predict":
            first.predict(model)
        else:
            again = trainer("again", max_epochs=2)
            again.fit(model, ckpt_path=sorted(glob.glob("csv/*/checkpoints/*.ckpt"))[-1])
            shown(again, stage)
            continue
        shown(first, stage)
    for path in sorted(glob.glob("*/*/metrics.csv")):
        with open(path) as f:
            record.put(path, list(csv.DictReader(f)))


if __name__ == "__main__":
    main()
