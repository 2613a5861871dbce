"""`self.log` called from a callback's own hooks (Lightning gives callbacks the module's `log` and
`log_dict`), and what a value logged in `on_train_start` becomes: `callback_metrics`,
`logged_metrics` and `progress_bar_metrics` after fit and after validate."""

import lightning.pytorch as pl
import record
from regressor import Regressor, loader


class Logs(pl.Callback):
    def on_train_start(self, trainer, pl_module):
        self.log("at_train_start", 1.0, prog_bar=True)

    def on_train_epoch_start(self, trainer, pl_module):
        self.log("at_epoch_start", float(trainer.current_epoch))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.log("at_batch_end", float(batch_idx), on_step=True, on_epoch=True)

    def on_train_epoch_end(self, trainer, pl_module):
        self.log_dict({"at_epoch_end": 5.0, "epochs_seen": float(trainer.current_epoch + 1)})

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self.log("at_val_batch_end", float(batch_idx), prog_bar=True)


def shown(trainer):
    return {
        "callback": record.metrics(trainer),
        "logged": {k: record.plain(v) for k, v in sorted(trainer.logged_metrics.items())},
        "bar": dict(sorted(trainer.progress_bar_metrics.items())),
    }


pl.seed_everything(5)
trainer = pl.Trainer(
    max_epochs=2,
    limit_val_batches=2,
    callbacks=[Logs()],
    enable_progress_bar=False,
    enable_model_summary=False,
    logger=False,
    enable_checkpointing=False,
)
model = Regressor()
val = loader(8, 1)
trainer.fit(model, loader(16, 0), val)
record.put("after_fit", shown(trainer))
trainer.validate(model, val)
record.put("after_validate", shown(trainer))
