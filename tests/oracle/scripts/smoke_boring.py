"""The smallest oracle script: Lightning's BoringModel for 2 epochs with validation."""

import lightning.pytorch as pl
import record
from lightning.pytorch.demos.boring_classes import BoringModel

pl.seed_everything(7)
model = BoringModel()
trainer = pl.Trainer(
    max_epochs=2,
    limit_train_batches=4,
    limit_val_batches=2,
    enable_progress_bar=False,
    enable_model_summary=False,
    logger=False,
    enable_checkpointing=False,
)
trainer.fit(model)
record.put("global_step", trainer.global_step)
record.put("callback_metrics", record.metrics(trainer))
record.weights("final", model)
