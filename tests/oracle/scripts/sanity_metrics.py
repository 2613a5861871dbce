"""What the sanity check's logged values look like from each hook around it, on one process: a
Callback records `callback_metrics`, `logged_metrics` and `progress_bar_metrics` at the sanity
check's start and end, at each validation hook and at the first training hooks.

Argument: one JSON object (all keys optional): "epoch_end_hook" (the callback also has an
`on_validation_epoch_end`), "module_epoch_end" (the module has one, and logs there), "step_values"
(validation also logs a value with `on_step=True`), "two_loaders" (two val loaders, one value
logged with `add_dataloader_idx=False`), "test" (`trainer.test` after the fit, its hooks recorded
too), "trainer" (Trainer arguments)."""

import json
import sys

import lightning as L
import record
import torch
from lightning.pytorch.callbacks import Callback
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ARGS = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}


def seen(trainer, key):
    record.append(
        "seen",
        {
            "at": key,
            "sanity": trainer.sanity_checking,
            "callback": {k: record.plain(v) for k, v in sorted(trainer.callback_metrics.items())},
            "logged": {k: record.plain(v) for k, v in sorted(trainer.logged_metrics.items())},
            "prog_bar": {k: record.plain(v) for k, v in sorted(trainer.progress_bar_metrics.items())},
        },
    )


class Recorder(Callback):
    def on_sanity_check_start(self, trainer, pl_module):
        seen(trainer, "on_sanity_check_start")

    def on_sanity_check_end(self, trainer, pl_module):
        seen(trainer, "on_sanity_check_end")

    def on_validation_start(self, trainer, pl_module):
        seen(trainer, "on_validation_start")

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        seen(trainer, "on_validation_batch_end")

    def on_validation_end(self, trainer, pl_module):
        seen(trainer, "on_validation_end")

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        seen(trainer, "on_test_batch_end")

    def on_test_end(self, trainer, pl_module):
        seen(trainer, "on_test_end")

    def on_train_start(self, trainer, pl_module):
        seen(trainer, "on_train_start")

    def on_train_epoch_start(self, trainer, pl_module):
        seen(trainer, "on_train_epoch_start")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch_idx == 0:
            seen(trainer, "on_train_batch_end")


class WithEpochEnd(Recorder):
    def on_validation_epoch_end(self, trainer, pl_module):
        seen(trainer, "on_validation_epoch_end")


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("val_loss", loss, prog_bar=True)
        if ARGS.get("step_values"):
            self.log("val_step", loss, on_step=True, on_epoch=False, prog_bar=True)
        if ARGS.get("two_loaders"):
            self.log(f"own_{dataloader_idx}", loss, on_step=True, prog_bar=True, add_dataloader_idx=False)

    def test_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("test_loss", loss, prog_bar=True)
        self.log("test_step_value", loss, on_step=True, on_epoch=False, prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class ModuleEpochEnd(Classifier):
    def on_validation_epoch_end(self):
        self.log("val_epoch_end_value", float(self.current_epoch))


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 4, generator=g), torch.randint(0, 3, (n,), generator=g))


def main():
    L.seed_everything(0)
    model = ModuleEpochEnd() if ARGS.get("module_epoch_end") else Classifier()
    callback = WithEpochEnd() if ARGS.get("epoch_end_hook") else Recorder()
    options = {
        "accelerator": "cpu", "devices": 1, "max_epochs": 1, "limit_train_batches": 2, "logger": False,
        "enable_progress_bar": False, "enable_model_summary": False, "enable_checkpointing": False,
        "callbacks": [callback], **ARGS.get("trainer", {}),
    }  # fmt: skip
    trainer = L.Trainer(**options)
    val = DataLoader(data(12, 2), batch_size=4)
    vals = [val, DataLoader(data(8, 3), batch_size=4)] if ARGS.get("two_loaders") else val
    trainer.fit(model, DataLoader(data(16, 1), batch_size=4), vals)
    if ARGS.get("test"):
        trainer.test(model, DataLoader(data(8, 4), batch_size=4))


if __name__ == "__main__":
    main()
