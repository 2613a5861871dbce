"""What `logged_metrics` and `progress_bar_metrics` hold (keys, values, value types) for each
on_step/on_epoch/prog_bar combination of `self.log`, in training (read during the batches and at the
epoch's end) and in validation and test (evaluation step values included), without a logger."""

import sys

import lightning.pytorch as pl
import record
import torch
from regressor import Regressor, loader

COMBOS = {"both": (True, True), "step": (True, False), "epoch": (False, True), "default": (None, None)}


def shown(trainer):
    """Both dicts as plain numbers, with each value's type name."""
    return {
        "logged": {k: [type(v).__name__, record.plain(v)] for k, v in sorted(trainer.logged_metrics.items())},
        "bar": {k: [type(v).__name__, v] for k, v in sorted(trainer.progress_bar_metrics.items())},
        "order": [
            list(trainer.callback_metrics),
            list(trainer.logged_metrics),
            list(trainer.progress_bar_metrics),
        ],
    }


class Model(Regressor):
    def _log_all(self, stage, batch):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        for name, (on_step, on_epoch) in COMBOS.items():
            self.log(f"{stage}_{name}", loss.detach(), on_step=on_step, on_epoch=on_epoch, prog_bar=True)
        self.log(f"{stage}_quiet", 3, on_step=True, on_epoch=True, logger=False)
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
            record.append("at_train_batch_1", shown(trainer))

    def on_train_epoch_end(self, trainer, pl_module):
        record.append("at_train_epoch_end", shown(trainer))


pl.seed_everything(7)
model = Model()
fast = sys.argv[1:] == ["fast_dev_run"]
trainer = pl.Trainer(
    max_epochs=2,
    limit_val_batches=3,
    fast_dev_run=fast,
    enable_progress_bar=False,
    enable_model_summary=False,
    logger=False,
    enable_checkpointing=False,
    callbacks=[Watch()],
)
val = loader(12, 1)
trainer.fit(model, loader(16, 0), val)
record.put("after_fit", shown(trainer))
trainer.validate(model, val)
record.put("after_validate", shown(trainer))
trainer.test(model, val)
record.put("after_test", shown(trainer))
