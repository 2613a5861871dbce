"""What the progress bar's `get_metrics(trainer, module)` gives a subclass that overrides it (the
items shown): read at the end of each training epoch and at the end of training."""

import lightning.pytorch as pl
import record
import torch
from lightning.pytorch.callbacks import TQDMProgressBar
from regressor import Regressor, loader


class Model(Regressor):
    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.log("loss", loss, prog_bar=True)
        self.log("seen", float(batch_idx), on_step=False, on_epoch=True, prog_bar=True, reduce_fx="max")
        return loss

    def on_train_epoch_end(self):
        self.log("epoch_sum", torch.tensor(float(self.current_epoch)), prog_bar=True, reduce_fx="sum")


class Bar(TQDMProgressBar):
    def get_metrics(self, trainer, pl_module):
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        return items

    def on_train_epoch_end(self, trainer, pl_module):
        super().on_train_epoch_end(trainer, pl_module)
        record.append("epoch_end", self.get_metrics(trainer, pl_module))

    def on_train_end(self, trainer, pl_module):
        super().on_train_end(trainer, pl_module)
        record.put("train_end", self.get_metrics(trainer, pl_module))


pl.seed_everything(3)
trainer = pl.Trainer(
    max_epochs=2,
    limit_val_batches=0,
    callbacks=[Bar()],
    enable_model_summary=False,
    logger=False,
    enable_checkpointing=False,
)
trainer.fit(Model(), loader(16, 0))
