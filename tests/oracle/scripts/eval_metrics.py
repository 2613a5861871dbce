"""What a Lightning user observes of evaluation metrics at every hook, on one or two processes: a
Callback records `callback_metrics`, `logged_metrics` and `progress_bar_metrics` at each
validation and test hook (and the sanity check's, and the first training hooks); what
`validate()`/`test()` return, and what the callbacks monitoring a value hold after a fit.

Argument: one JSON object (all keys optional): "ddp" (two CPU processes, DDP over gloo, a record
per rank), "stages" (what runs, in order: "fit", "validate", "test"), "loaders" (evaluation loaders,
1 or 2), "empty_second" (the second loader has no batch), "sync" (epoch values with `sync_dist`),
"step_sync"/"step_own" (an `on_step=True` value, synced or not), "empty_first" (the first has none),
"own_name" (a value with `add_dataloader_idx=False`), "module_epoch_end" (the module logs in its epoch-end hooks),
"torchmetric" (a torchmetrics `Metric` logged, on_step and on_epoch), "log_dict", "extras" (a sum on the bar only, a batch size given, a step value not
logged), "callback_log"
(a callback logs in `on_validation_batch_end` and `on_validation_epoch_end`), "monitor" (a name
EarlyStopping and ModelCheckpoint monitor), "csv" (a CSVLogger: its rows recorded), "collection" (a MetricCollection
given to `log_dict`), "log_refused" (the module tries to log in the start and end hooks, some refused),
"log_points" (the module logs in its
epoch-start and validation batch-start/end hooks), "trainer" (Trainer arguments)."""

import csv
import glob
import json
import sys

import lightning as L
import record
import torch
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ARGS = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
record.PER_RANK = bool(ARGS.get("ddp"))


def values(d):
    return {k: record.plain(v) for k, v in sorted(d.items())}


def seen(trainer, key):
    record.append(
        "seen",
        {
            "at": key,
            "sanity": trainer.sanity_checking,
            "callback": values(trainer.callback_metrics),
            "logged": values(trainer.logged_metrics),
            "prog_bar": values(trainer.progress_bar_metrics),
        },
    )


class Recorder(Callback):
    pass


def _recording(name):
    def hook(self, trainer, *args, **kwargs):
        if name == "on_train_batch_end" and args[-1] > 0:
            return
        seen(trainer, name)

    return hook


for _stage in ("validation", "test"):
    for _point in ("start", "epoch_start", "batch_start", "batch_end", "epoch_end", "end"):
        setattr(Recorder, f"on_{_stage}_{_point}", _recording(f"on_{_stage}_{_point}"))
for _name in ("on_sanity_check_start", "on_sanity_check_end", "on_train_start", "on_train_batch_end"):
    setattr(Recorder, _name, _recording(_name))
Recorder.on_train_epoch_end = _recording("on_train_epoch_end")


class Logging(Callback):
    """A callback that logs through the module."""

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        pl_module.log("cb_batch", float(batch_idx + 1), on_step=True, on_epoch=True, prog_bar=True)

    def on_validation_epoch_end(self, trainer, pl_module):
        pl_module.log("cb_epoch", float(trainer.current_epoch + 10), prog_bar=True)


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
        if ARGS.get("torchmetric"):
            from torchmetrics.classification import MulticlassAccuracy

            self.acc = MulticlassAccuracy(num_classes=3, average="micro")
        if ARGS.get("collection"):
            from torchmetrics import MetricCollection
            from torchmetrics.classification import MulticlassAccuracy, MulticlassPrecision

            self.metrics = MetricCollection(
                {"c_acc": MulticlassAccuracy(num_classes=3), "c_prec": MulticlassPrecision(num_classes=3)}
            )

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def _evaluate(self, prefix, batch, dataloader_idx):
        x, y = batch
        logits = self.net(x)
        loss = nn.functional.cross_entropy(logits, y)
        sync = bool(ARGS.get("sync"))
        self.log(f"{prefix}_loss", loss, prog_bar=True, sync_dist=sync)
        self.log(f"{prefix}_max", loss, reduce_fx="max", sync_dist=sync)
        if ARGS.get("step_sync"):
            self.log(f"{prefix}_ss", loss, on_step=True, on_epoch=True, prog_bar=True, sync_dist=True)
        if ARGS.get("step_own"):
            self.log(f"{prefix}_so", loss + self.global_rank, on_step=True, on_epoch=False, prog_bar=True)
        if ARGS.get("own_name"):
            self.log(f"{prefix}_own_{dataloader_idx}", loss, on_step=True, add_dataloader_idx=False)
        if ARGS.get("torchmetric"):
            self.acc(logits, y)
            self.log(f"{prefix}_acc", self.acc, on_step=True, on_epoch=True, prog_bar=True)
        if ARGS.get("collection"):
            self.metrics.update(logits, y)
            self.log_dict(self.metrics, prog_bar=True)
        if ARGS.get("log_dict"):
            self.log_dict({f"{prefix}_d1": loss * 2, f"{prefix}_d2": loss * 3}, on_step=True, prog_bar=True)
            self.log_dict({f"{prefix}_e1": loss, f"{prefix}_e2": 7.0}, sync_dist=sync, logger=False)
        if ARGS.get("extras"):  # other options: a sum shown only on the bar, a batch size given
            self.log(f"{prefix}_sum", loss, on_step=True, reduce_fx="sum", logger=False, prog_bar=True)
            self.log(f"{prefix}_bs", loss, batch_size=1 + dataloader_idx, sync_dist=sync)
            self.log(f"{prefix}_hidden", loss, on_step=True, on_epoch=False, logger=False, sync_dist=sync)

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        self._evaluate("val", batch, dataloader_idx)

    def test_step(self, batch, batch_idx, dataloader_idx=0):
        self._evaluate("test", batch, dataloader_idx)

    def on_validation_start(self):
        if ARGS.get("log_refused"):
            self._refused("on_validation_start")

    def on_validation_end(self):
        if ARGS.get("log_refused"):
            self._refused("on_validation_end")

    def on_test_start(self):
        if ARGS.get("log_refused"):
            self._refused("on_test_start")

    def on_test_epoch_start(self):
        if ARGS.get("log_points"):
            self.log("test_epoch_start", 4.0, prog_bar=True)
        if ARGS.get("log_refused"):
            self._refused("on_test_epoch_start", on_epoch=False)

    def on_test_end(self):
        if ARGS.get("log_refused"):
            self._refused("on_test_end")

    def _refused(self, hook, **options):
        try:
            self.log("nowhere", 1.0, **options)
            record.append("refusals", [hook, None])
        except Exception as err:  # what each framework says
            refused = isinstance(err, MisconfigurationException)
            record.append("refusals", [hook, refused, str(err)])

    def on_validation_epoch_start(self):
        if ARGS.get("log_points"):
            self.log("val_epoch_start", 3.0, prog_bar=True)

    def on_validation_batch_start(self, batch, batch_idx, dataloader_idx=0):
        if ARGS.get("log_points"):
            self.log("val_batch_start", float(batch_idx), on_step=True, on_epoch=True, prog_bar=True)

    def on_validation_batch_end(self, outputs, batch, batch_idx, dataloader_idx=0):
        if ARGS.get("log_points"):
            self.log("val_batch_end", float(batch_idx), on_step=True, reduce_fx="max", sync_dist=True)

    def on_validation_epoch_end(self):
        if ARGS.get("log_refused"):
            self._refused("on_validation_epoch_end", on_step=True)
        if ARGS.get("module_epoch_end"):
            self.log("val_end", float(self.current_epoch), prog_bar=True, sync_dist=bool(ARGS.get("sync")))

    def on_test_epoch_end(self):
        if ARGS.get("module_epoch_end"):
            self.log("test_end", 5.0, prog_bar=True, sync_dist=bool(ARGS.get("sync")))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 4, generator=g), torch.randint(0, 3, (n,), generator=g))


def loaders(seed):
    first = DataLoader(data(12, seed), batch_size=3)
    if ARGS.get("loaders", 1) == 1:
        return first
    second = DataLoader(data(0 if ARGS.get("empty_second") else 8, seed + 1), batch_size=2)
    if ARGS.get("empty_first"):
        first = DataLoader(data(0, seed), batch_size=3)
    return [first, second]


def main():
    L.seed_everything(0)
    model = Classifier()
    callbacks = [Recorder()]
    if ARGS.get("callback_log"):
        callbacks.append(Logging())
    monitor = ARGS.get("monitor")
    if monitor:
        callbacks.append(EarlyStopping(monitor, patience=0, min_delta=0.5))
        callbacks.append(ModelCheckpoint(dirpath="ckpts", monitor=monitor, save_top_k=2))
    ddp = {"devices": 2, "strategy": "ddp"} if ARGS.get("ddp") else {"devices": 1}
    options = {
        "accelerator": "cpu", **ddp, "max_epochs": 1, "limit_train_batches": 2,
        "logger": CSVLogger(".", name="csv") if ARGS.get("csv") else False, "log_every_n_steps": 1,
        "enable_progress_bar": False, "enable_model_summary": False, "enable_checkpointing": bool(monitor),
        "callbacks": callbacks, **ARGS.get("trainer", {}),
    }  # fmt: skip
    trainer = L.Trainer(**options)
    for stage in ARGS.get("stages", ["fit"]):
        record.append("seen", {"at": f"stage {stage}"})
        if stage == "fit":
            trainer.fit(model, DataLoader(data(16, 1), batch_size=4, shuffle=True), loaders(2))
        elif stage == "validate":
            record.put("validate", trainer.validate(model, loaders(5), verbose=False))
        else:
            record.put("test", trainer.test(model, loaders(7), verbose=False))
        seen(trainer, f"after {stage}")
    if ARGS.get("csv") and trainer.is_global_zero:
        for path in sorted(glob.glob("csv/*/metrics.csv")):
            with open(path) as f:
                record.put(path, list(csv.DictReader(f)))
    if monitor:
        stopper, ckpt = trainer.early_stopping_callback, trainer.checkpoint_callback
        record.put("stopped", [stopper.stopped_epoch, stopper.wait_count, stopper.best_score])
        record.put("best", [ckpt.best_model_score, sorted(p.rsplit("/", 1)[-1] for p in ckpt.best_k_models)])
        record.put("epoch", trainer.current_epoch)


if __name__ == "__main__":
    main()
