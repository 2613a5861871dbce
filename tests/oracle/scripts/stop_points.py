"""Where a stop, a cut epoch and a ReduceLROnPlateau meet validation and the gradients: -1 from
`on_train_batch_start` with a step-interval plateau; a step-interval plateau monitoring a validation
metric under accumulation; `should_stop` inside a window (the gradients kept through validation);
EarlyStopping right after a `val_check_interval` validation; a stop between two intervals; the
gradients at an epoch's start; `min_steps` alone; an epoch plateau after a stop."""

import sys

import lightning.pytorch as pl
import record
import torch
from lightning.pytorch.callbacks import EarlyStopping
from lightning.pytorch.demos.boring_classes import BoringModel

RUN = sys.argv[1]


class Points(BoringModel):
    validations = 0

    def training_step(self, batch, batch_idx):
        out = super().training_step(batch, batch_idx)
        self.log("tl", out["loss"], on_epoch=RUN == "stop_plateau")
        if (RUN, batch_idx) in {
            ("stop_in_window", 2),
            ("stop_between", 4),
            ("stop_plateau", 2),
            ("min_steps", 0),
        }:
            self.trainer.should_stop = True
        return out

    def validation_step(self, batch, batch_idx):
        out = super().validation_step(batch, batch_idx)
        self.log("val_loss", out["x"] if RUN != "early_stopping" else float(self.validations))
        return out

    def on_validation_end(self):
        self.validations += 1
        record.append(f"{RUN}/events", f"validation {self.validations} at step {self.trainer.global_step}")

    def on_validation_model_zero_grad(self):
        record.append(f"{RUN}/events", "on_validation_model_zero_grad")
        super().on_validation_model_zero_grad()

    def on_train_batch_start(self, batch, batch_idx):
        if batch_idx == 0:
            record.append(
                f"{RUN}/events",
                f"epoch {self.current_epoch} starts, grad held {self.layer.weight.grad is not None}",
            )
        return -1 if RUN == "cut_plateau" and batch_idx == 2 else None

    def on_train_end(self):
        record.append(f"{RUN}/events", f"train end, grad held {self.layer.weight.grad is not None}")

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5, threshold=10.0)
        if RUN == "cut_plateau":
            return [opt], [{"scheduler": plateau, "interval": "step", "monitor": "tl"}]
        if RUN == "val_plateau":
            return [opt], [{"scheduler": plateau, "interval": "step", "frequency": 4, "monitor": "val_loss"}]
        if RUN == "stop_plateau":
            return [opt], [{"scheduler": plateau, "monitor": "tl"}]
        return opt


RUNS = {
    "cut_plateau": dict(limit_val_batches=0),
    "val_plateau": dict(accumulate_grad_batches=2, val_check_interval=4),
    "stop_in_window": dict(accumulate_grad_batches=2),
    "early_stopping": dict(val_check_interval=2, callbacks=[EarlyStopping("val_loss", patience=0)]),
    "stop_between": dict(val_check_interval=3),
    "epoch_starts": dict(max_epochs=2, limit_train_batches=2, limit_val_batches=0),
    "min_steps": dict(max_epochs=3, min_steps=2, limit_train_batches=6, limit_val_batches=0),
    "stop_plateau": dict(max_epochs=2, limit_val_batches=0),
}
pl.seed_everything(1)
kwargs = dict(max_epochs=1, limit_train_batches=8, limit_val_batches=1, num_sanity_val_steps=0, logger=False,
              enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
model = Points()
trainer = pl.Trainer(**{**kwargs, **RUNS[RUN]})
trainer.fit(model)
record.put(f"{RUN}/end", [trainer.global_step, trainer.optimizers[0].param_groups[0]["lr"]])
record.weights(RUN, model)
