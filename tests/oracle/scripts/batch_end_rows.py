"""Values logged in `on_train_batch_end` (by a callback and by the module) and the training rows the
CSVLogger writes: what each row holds, and `callback_metrics`, `logged_metrics` and the progress bar
as callbacks see them at the batch hooks and epoch end.

Argument: one JSON object: "trainer" (more Trainer arguments); "cb" / "mod": options for
`log("cb", ...)` in a callback's / the module's `on_train_batch_end` ("at": [batch indices] to log
only there; "metric": log a torchmetrics MeanMetric object; "rank0": on global rank zero only);
"step_key": log "step" there too; "manual": manual optimization ("manual_skip": its optimizer steps
at even batches only); "ckpt_every": ModelCheckpoint(every_n_train_steps=N, save_top_k=-1);
"resume": a second fit (max_epochs + 1) from the last of those checkpoints (or the one named), the
same logger version; "monitor": ModelCheckpoint / EarlyStopping monitoring "cb"; "lrm": a
LearningRateMonitor; "raise_at": the module's on_train_batch_end raises at that batch (the first
fit only; "exception_ckpt": with OnExceptionCheckpoint); "interrupt_at": raises KeyboardInterrupt;
"stop_at": sets should_stop; "mod_snap": the module's hook records what it sees after logging;
"cut_at": on_train_batch_start returns -1 there."""

import csv
import glob
import json
import os
import sys

import lightning as L
import record
import torch
from lightning.pytorch.callbacks import Callback, EarlyStopping, LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ARGS = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}


RAISED: list[int] = []  # (raise_at: the first fit only)


class Stop(Exception):
    pass


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g))


def snapshot(trainer, at):
    record.append(
        "seen",
        [
            at,
            {
                "callback": record.metrics(trainer),
                "logged": {k: record.plain(v) for k, v in sorted(trainer.logged_metrics.items())},
                "bar": {k: record.plain(v) for k, v in sorted(trainer.progress_bar_metrics.items())},
            },
        ],
    )


def log_at_end(module, key, options, batch_idx, holder):
    if options is None:
        return
    at = options.get("at")
    if at is not None and batch_idx not in at:
        return
    if options.get("rank0") and module.global_rank != 0:
        return
    opts = {k: v for k, v in options.items() if k not in ("at", "metric", "rank0")}
    value = float(module.global_step * 10 + batch_idx + 1)
    if options.get("metric"):
        holder(torch.tensor(value))
        module.log(key, holder, **opts)
    else:
        module.log(key, value, **opts)
    if ARGS.get("step_key") and key == "cb":
        module.log("step", float(100 + module.global_step))


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 1)
        self.automatic_optimization = not ARGS.get("manual")
        if ARGS.get("mod", {}).get("metric"):
            import torchmetrics

            self.mod_metric = torchmetrics.MeanMetric()

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("loss", loss, on_step=True, on_epoch=True, prog_bar=True)
        if ARGS.get("manual"):
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(loss)
            if not (ARGS.get("manual_skip") and batch_idx % 2):
                opt.step()
            return None
        return loss

    def on_train_batch_start(self, batch, batch_idx):
        if ARGS.get("cut_at") is not None and batch_idx == ARGS["cut_at"]:
            return -1
        return None

    def on_train_batch_end(self, outputs, batch, batch_idx):
        log_at_end(self, "mod", ARGS.get("mod"), batch_idx, getattr(self, "mod_metric", None))
        if ARGS.get("mod_snap"):
            snapshot(self.trainer, f"module end {self.current_epoch}/{batch_idx} g{self.global_step}")
        if ARGS.get("raise_at") is not None and batch_idx == ARGS["raise_at"] and not RAISED:
            RAISED.append(batch_idx)
            raise Stop("stop")
        if ARGS.get("interrupt_at") is not None and batch_idx == ARGS["interrupt_at"]:
            raise KeyboardInterrupt
        if ARGS.get("stop_at") is not None and batch_idx == ARGS["stop_at"]:
            self.trainer.should_stop = True

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val", nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)}

    def train_dataloader(self):
        return DataLoader(data(ARGS.get("n", 32), 1), batch_size=4)

    def val_dataloader(self):
        return DataLoader(data(8, 2), batch_size=4)


class Logs(Callback):
    def __init__(self):
        self.metric = None
        if ARGS.get("cb", {}).get("metric"):
            import torchmetrics

            self.metric = torchmetrics.MeanMetric()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        log_at_end(pl_module, "cb", ARGS.get("cb"), batch_idx, self.metric)


class Watch(Callback):
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        snapshot(trainer, f"start {trainer.current_epoch}/{batch_idx} g{trainer.global_step}")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        snapshot(trainer, f"end {trainer.current_epoch}/{batch_idx} g{trainer.global_step}")

    def on_validation_start(self, trainer, pl_module):
        if not trainer.sanity_checking:
            snapshot(trainer, f"val start g{trainer.global_step}")

    def on_train_epoch_end(self, trainer, pl_module):
        snapshot(trainer, f"epoch end {trainer.current_epoch}")

    def on_train_end(self, trainer, pl_module):
        snapshot(trainer, "train end")


def make_trainer(max_epochs, logger):
    callbacks = [Logs(), Watch()]
    if ARGS.get("ckpt_every"):
        callbacks.append(
            ModelCheckpoint(dirpath="ckpts", every_n_train_steps=ARGS["ckpt_every"], save_top_k=-1,
                            filename="{epoch}-{step}")
        )  # fmt: skip
    if ARGS.get("monitor"):
        callbacks.append(ModelCheckpoint(dirpath="best", monitor="cb", mode="max", every_n_train_steps=1))
        callbacks.append(EarlyStopping(monitor="cb", mode="min", patience=0, check_on_train_epoch_end=True))
    if ARGS.get("exception_ckpt"):
        from lightning.pytorch.callbacks import OnExceptionCheckpoint

        callbacks.append(OnExceptionCheckpoint(dirpath="ckpts", filename="on_exception"))
    if ARGS.get("lrm"):
        callbacks.append(LearningRateMonitor(logging_interval=ARGS["lrm"]))
    options = {
        "accelerator": "cpu", "devices": 1, "max_epochs": max_epochs, "log_every_n_steps": 2,
        "logger": logger, "enable_progress_bar": False, "enable_model_summary": False,
        "default_root_dir": ".", "callbacks": callbacks, "limit_val_batches": 1, "num_sanity_val_steps": 0,
        "enable_checkpointing": bool(ARGS.get("ckpt_every") or ARGS.get("monitor") or ARGS.get("exception_ckpt")),
        **ARGS.get("trainer", {}),
    }  # fmt: skip
    return L.Trainer(**options)


def main():
    L.seed_everything(0)
    model = Model()
    max_epochs = ARGS.get("trainer", {}).get("max_epochs", 2)
    trainer = make_trainer(max_epochs, CSVLogger(".", name="csv", version=0))
    try:
        trainer.fit(model)
    except Stop:
        record.put("stopped", True)
        snapshot(trainer, "after stop")
    if ARGS.get("resume"):
        with open("csv/version_0/metrics.csv") as f:
            record.put("first fit's rows", list(csv.DictReader(f)))
        ckpts = sorted(glob.glob("ckpts/*.ckpt"), key=os.path.getmtime)
        record.put("ckpts", [os.path.basename(c) for c in ckpts])
        pick = (
            f"ckpts/{ARGS['resume']}"
            if isinstance(ARGS["resume"], str)
            else ckpts[ARGS.get("resume_index", -1)]
        )
        record.put("resumed from", os.path.basename(pick))
        again = make_trainer(max_epochs + 1, CSVLogger(".", name="csv", version=0))
        again.fit(Model(), ckpt_path=pick)
    for path in sorted(glob.glob("*/*/metrics.csv")):
        with open(path) as f:
            record.put(path, list(csv.DictReader(f)))


if __name__ == "__main__":
    main()
