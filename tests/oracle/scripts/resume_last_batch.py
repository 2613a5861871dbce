"""A checkpoint written by `ModelCheckpoint(every_n_train_steps=4)` at the last of an epoch's four
batches, then a fit resumed from it: the hooks each framework runs after the save point."""

import glob

import lightning.pytorch as pl
import record
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.demos.boring_classes import BoringModel


class Hooks(BoringModel):
    def on_train_epoch_start(self):
        record.append("events", f"epoch_start {self.current_epoch}")

    def on_train_epoch_end(self):
        record.append("events", f"epoch_end {self.current_epoch} step={self.trainer.global_step}")

    def on_train_batch_start(self, batch, batch_idx):
        record.append("events", f"batch {self.current_epoch}/{batch_idx}")

    def on_validation_epoch_end(self):
        record.append("events", f"validation_end {self.current_epoch}")


def trainer(epochs, **kwargs):
    return pl.Trainer(
        max_epochs=epochs, limit_train_batches=4, limit_val_batches=2, logger=False, num_sanity_val_steps=0,
        enable_model_summary=False, enable_progress_bar=False, **kwargs,
    )  # fmt: skip


pl.seed_everything(1)
trainer(1, callbacks=[ModelCheckpoint(dirpath="ck", every_n_train_steps=4, save_top_k=-1)]).fit(Hooks())
record.append("events", "resumed")
resumed = trainer(2)
resumed.fit(Hooks(), ckpt_path=glob.glob("ck/*step=4*")[0])
record.put("end", [resumed.current_epoch, resumed.global_step])
