"""Which `callback_metrics` keys (and values) each on_step/on_epoch combination of `self.log` gives,
in training, validation and test: read during the batches and after each stage."""

import lightning.pytorch as pl
import record
import torch
from regressor import Regressor, loader

COMBOS = {"both": (True, True), "step": (True, False), "epoch": (False, True), "default": (None, None)}


class Model(Regressor):
    def _log_all(self, stage, batch):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        for name, (on_step, on_epoch) in COMBOS.items():
            self.log(f"{stage}_{name}", loss.detach(), on_step=on_step, on_epoch=on_epoch)
        return loss

    def training_step(self, batch, batch_idx):
        return self._log_all("train", batch)

    def validation_step(self, batch, batch_idx):
        self._log_all("val", batch)

    def test_step(self, batch, batch_idx):
        self._log_all("test", batch)


class Watch(pl.Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch_idx == 1:
            record.append("at_train_batch_1", record.metrics(trainer))

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        if batch_idx == 1:
            record.append("at_val_batch_1", record.metrics(trainer))

    def on_train_epoch_end(self, trainer, pl_module):
        record.append("at_train_epoch_end", record.metrics(trainer))


pl.seed_everything(7)
model = Model()
trainer = pl.Trainer(
    max_epochs=2,
    limit_val_batches=3,
    enable_progress_bar=False,
    enable_model_summary=False,
    logger=False,
    enable_checkpointing=False,
    callbacks=[Watch()],
)
val = loader(12, 1)
trainer.fit(model, loader(16, 0), val)
record.put("after_fit", record.metrics(trainer))
trainer.validate(model, val)
record.put("after_validate", record.metrics(trainer))
trainer.test(model, val)
record.put("after_test", record.metrics(trainer))
