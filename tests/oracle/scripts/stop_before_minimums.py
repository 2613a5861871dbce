"""EarlyStopping that wants to stop after the first epoch while `min_steps` (not a whole number of
epochs) or `min_epochs` is not reached yet: where the fit ends (epoch, step), whether `should_stop`
stays set, the checkpoint files; then a fit resumed from the last one with fewer `max_epochs` than
it had done (Lightning refuses it)."""

import sys
from pathlib import Path

import lightning.pytorch as pl
import record
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from regressor import Regressor, loader

min_steps, min_epochs = {"steps": (10, 0), "epochs": (0, 3), "both": (10, 1)}[sys.argv[1]]
pl.seed_everything(3)
model = Regressor(val_scores=[1.0] * 10)  # never improves: patience 1 stops after the second check
trainer = pl.Trainer(
    max_epochs=10,
    min_steps=min_steps,
    min_epochs=min_epochs,
    limit_train_batches=3,
    limit_val_batches=1,
    enable_progress_bar=False,
    enable_model_summary=False,
    logger=False,
    callbacks=[
        EarlyStopping(monitor="score", patience=1),
        ModelCheckpoint(dirpath="ckpts", save_last=True, every_n_train_steps=1, save_top_k=-1),
    ],
)
trainer.fit(model, loader(48, 0), loader(4, 1))
record.put("current_epoch", trainer.current_epoch)
record.put("global_step", trainer.global_step)
record.put("should_stop", trainer.should_stop)
record.put("files", sorted(p.name for p in Path("ckpts").iterdir()))
record.weights("final", model)

again = pl.Trainer(max_epochs=1, enable_progress_bar=False, enable_model_summary=False, logger=False)
try:
    again.fit(Regressor(), loader(48, 0), loader(4, 1), ckpt_path="ckpts/last.ckpt")
    record.put("resumed", None)
except Exception as err:  # Lightning's MisconfigurationException, surge's MisconfigurationError
    record.put("resumed", str(err).split(",")[0])  # "You restored a checkpoint with current_epoch=N"
