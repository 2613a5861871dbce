"""A small classifier fitted on two CPU processes (DDP over gloo) with shuffled training data, one
cross-rank feature at a time: every rank records, at each training epoch's end and validation
epoch's end, its `callback_metrics`, `logged_metrics`, `global_step`, `current_epoch` and learning
rate, and after the fit what the callbacks hold; the metrics go to metrics.csv (CSVLogger).

Argument: one JSON object (all keys optional): "trainer" (Trainer arguments), "lr", "sched"
("step": StepLR, "plateau": ReduceLROnPlateau on val_loss), "early_stop" (EarlyStopping on
val_loss with this patience), "topk" (ModelCheckpoint monitoring val_loss, save_top_k=2),
"lr_monitor", "sync_log" (train-step logs with sync_dist: mean, max, sum), "gather" (all_gather
in validation), "predict" (trainer.predict on two ranks after the fit), "epoch_end_log" (synced
min/max logs in validation, and the module's on_validation_epoch_end reading callback_metrics and
logging), "batch_end" (each training batch's end records `callback_metrics` and the step)."""

import json
import sys

import lightning as L
import record
import torch
from lightning.pytorch.callbacks import Callback, EarlyStopping, LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ARGS = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
record.PER_RANK = True


def metrics(values):
    return {k: record.plain(v) for k, v in sorted(values.items())}


class Recorder(Callback):
    def state(self, trainer, key):
        record.append(
            key,
            {
                "callback": metrics(trainer.callback_metrics),
                "logged": metrics(trainer.logged_metrics),
                "global_step": trainer.global_step,
                "epoch": trainer.current_epoch,
                "lr": [g["lr"] for g in trainer.optimizers[0].param_groups],
            },
        )

    def on_train_epoch_end(self, trainer, pl_module):
        self.state(trainer, "train_epoch_end")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if ARGS.get("batch_end"):
            record.append("batch_end", {"step": trainer.global_step, **metrics(trainer.callback_metrics)})

    def on_validation_epoch_end(self, trainer, pl_module):
        self.state(trainer, "val_epoch_end")

    def on_train_end(self, trainer, pl_module):
        self.state(trainer, "train_end")


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 3))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True, sync_dist=bool(ARGS.get("sync_log")))
        if ARGS.get("sync_log"):
            self.log("loss_own", loss, on_step=True, on_epoch=True)
            self.log("loss_max", loss, on_step=True, on_epoch=True, sync_dist=True, reduce_fx="max")
            self.log("loss_sum", loss, on_step=False, on_epoch=True, sync_dist=True, reduce_fx="sum")
            self.log("rank_sum", float(self.global_rank + 1), on_step=True, sync_dist=True, reduce_fx="sum")
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("val_loss", loss, sync_dist=True)
        if ARGS.get("epoch_end_log"):
            self.log("val_min", loss, sync_dist=True, reduce_fx="min")
            self.log("val_step_max", loss, on_step=True, on_epoch=False, sync_dist=True, reduce_fx="max")
        if ARGS.get("gather"):
            gathered = self.all_gather(loss)
            record.append("gathered", gathered)
            self.log("gathered_mean", gathered.mean())
            both = self.all_gather({"x": x[:2], "n": torch.tensor(batch_idx)})
            record.append("gathered_dict", {"x_shape": list(both["x"].shape), "n": both["n"]})

    def on_validation_epoch_end(self):
        if ARGS.get("epoch_end_log"):  # what the module sees there, and a value it logs there
            record.append("module_val_epoch_end", metrics(self.trainer.callback_metrics))
            self.log("val_epoch_rank", float(self.global_rank), sync_dist=True, reduce_fx="max")

    def predict_step(self, batch, batch_idx):
        x, _ = batch
        return self(x)

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=ARGS.get("lr", 0.1))
        sched = ARGS.get("sched")
        if sched == "step":
            return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)}
        if sched == "plateau":
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=0, threshold=0.5)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": plateau, "monitor": "val_loss"}}
        return opt


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 4, generator=g) * 2, torch.randint(0, 3, (n,), generator=g))


def main():
    L.seed_everything(0)
    model = Classifier()
    callbacks = [Recorder()]
    if "early_stop" in ARGS:
        callbacks.append(EarlyStopping("val_loss", patience=ARGS["early_stop"], min_delta=0.05))
    if ARGS.get("topk"):
        callbacks.append(ModelCheckpoint(dirpath="ckpts", monitor="val_loss", save_top_k=2))
    if ARGS.get("lr_monitor"):
        callbacks.append(LearningRateMonitor(logging_interval=ARGS["lr_monitor"]))
    options = {
        "accelerator": "cpu", "devices": 2, "strategy": "ddp", "max_epochs": 4,
        "logger": CSVLogger(".", name="csv"), "log_every_n_steps": 1, "enable_progress_bar": False,
        "enable_model_summary": False, "enable_checkpointing": bool(ARGS.get("topk")),
        "callbacks": callbacks, **ARGS.get("trainer", {}),
    }  # fmt: skip
    trainer = L.Trainer(**options)
    train = DataLoader(data(64, 1), batch_size=4, shuffle=True)  # 8 batches per rank
    val = DataLoader(data(16, 2), batch_size=4)  # 2 batches per rank
    trainer.fit(model, train, val)
    record.put("after_fit", record.metrics(trainer))
    record.put("global_step", trainer.global_step)
    record.put("epoch", trainer.current_epoch)
    record.put("should_stop", trainer.should_stop)
    if "early_stop" in ARGS:
        stopper = trainer.early_stopping_callback
        record.put("stopped_epoch", stopper.stopped_epoch)
        record.put("wait_count", stopper.wait_count)
        record.put("best_score", stopper.best_score)
    if ARGS.get("topk"):
        ckpt = trainer.checkpoint_callback
        record.put("best_model_score", ckpt.best_model_score)
        record.put("best_model_path", ckpt.best_model_path.rsplit("/", 1)[-1])
        record.put("best_k_models", {k.rsplit("/", 1)[-1]: v for k, v in sorted(ckpt.best_k_models.items())})
        record.put("kth_best", ckpt.kth_best_model_path.rsplit("/", 1)[-1])
    if ARGS.get("predict"):
        predictions = trainer.predict(model, DataLoader(data(16, 3), batch_size=4))
        record.put("predictions", predictions)
    record.weights("final", model)


if __name__ == "__main__":
    main()
