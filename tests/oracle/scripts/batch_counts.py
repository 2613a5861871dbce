"""The batch counts a fit reports: the trainer's num_training_batches/num_val_batches and the
progress bar's totals at each epoch's end, under check_val_every_n_epoch, max_steps, a module
without validation_step and overfit_batches."""

import lightning.pytorch as pl
import record
from lightning.pytorch.demos.boring_classes import BoringModel


class Counting(BoringModel):
    def on_train_epoch_end(self):
        bar = self.trainer.progress_bar_callback
        record.append(f"{RUN}/totals", [bar.total_train_batches, bar.total_val_batches])


RUNS = {
    "every_2": dict(max_epochs=4, check_val_every_n_epoch=2, limit_val_batches=2),
    "by_steps": dict(max_epochs=-1, max_steps=100, limit_val_batches=0),
    "overfit": dict(max_epochs=2, overfit_batches=3),
    "no_val_step": dict(max_epochs=1, limit_train_batches=0.25),
}
for RUN, kwargs in RUNS.items():
    pl.seed_everything(1)
    model = Counting()
    if RUN == "no_val_step":
        model.validation_step = None
    trainer = pl.Trainer(
        num_sanity_val_steps=0, logger=False, enable_checkpointing=False, enable_model_summary=False, **kwargs
    )
    trainer.fit(model)
    record.put(f"{RUN}/num_training_batches", trainer.num_training_batches)
    record.put(f"{RUN}/num_val_batches", trainer.num_val_batches)
