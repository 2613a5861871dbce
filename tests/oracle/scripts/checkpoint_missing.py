"""ModelCheckpoint(monitor=...) naming a metric that is never logged: with validation ("val") the fit
stops at the first save after a validation ran; without ("noval") each save is skipped with a
warning. What was raised, at which step, and the files are recorded."""

import sys
from pathlib import Path

import lightning.pytorch as pl
import record
from lightning.pytorch.callbacks import ModelCheckpoint
from regressor import Regressor, loader

pl.seed_everything(3)
callback = ModelCheckpoint(dirpath="ckpts", monitor="val_acc")
trainer = pl.Trainer(
    max_epochs=2,
    limit_val_batches=2 if sys.argv[1] == "val" else 0,
    enable_progress_bar=False,
    enable_model_summary=False,
    logger=False,
    callbacks=[callback],
)
try:
    trainer.fit(Regressor(), loader(16, 0), loader(8, 1))
    record.put("raised", None)
except Exception as err:  # Lightning's MisconfigurationException, surge's MisconfigurationError
    record.put("raised", "could not find the monitored key" in str(err) and "val_acc" in str(err))
record.put("global_step", trainer.global_step)
record.put("files", sorted(p.name for p in Path("ckpts").glob("*")))
