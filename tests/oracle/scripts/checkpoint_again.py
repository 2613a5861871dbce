"""Two fits, one after the other, writing checkpoints to the same directory (a script run twice):
what the second leaves beside the first's files (`-v1` names), with `dirpath` given or the default."""

import sys
from pathlib import Path

import lightning.pytorch as pl
import record
from lightning.pytorch.callbacks import ModelCheckpoint
from regressor import Regressor, checkpoint_state, loader

given = sys.argv[1] == "dirpath"
folder = Path("ckpts" if given else "checkpoints")
for run in ("first", "second"):
    pl.seed_everything(3)
    model = Regressor()
    callback = ModelCheckpoint(dirpath="ckpts" if given else None, monitor="val_loss", save_last=True)
    trainer = pl.Trainer(
        max_epochs=3,
        limit_val_batches=2,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        callbacks=[callback],
    )
    trainer.fit(model, loader(16, 0), loader(8, 1))
    record.put(f"{run}_files", sorted(p.name for p in folder.iterdir()))
    checkpoint_state(callback, f"{run}_checkpoint")
    record.weights(run, model)
