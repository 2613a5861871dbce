"""EarlyStopping on a scripted validation value (`score`), one configuration per argument; what it
decided (epoch, reason, message, counters) and the files of a ModelCheckpoint(save_last=True) on
the same value are recorded."""

import math
import sys
from pathlib import Path

import lightning.pytorch as pl
import record
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from regressor import Regressor, checkpoint_state, loader

NAN = math.nan
CASES = {
    "patience": ([0.9, 0.8, 0.85, 0.7, 0.75, 0.71, 0.1, 0.1], dict(patience=2)),
    "min_delta": ([0.5, 0.505, 0.509, 0.6, 0.6, 0.6, 0.6, 0.6], dict(mode="max", patience=2, min_delta=0.01)),
    "stopping_threshold": ([0.9, 0.5, 0.3, 0.1, 0.1, 0.1, 0.1, 0.1], dict(stopping_threshold=0.4)),
    "divergence_threshold": ([0.5, 0.9, 5.0, 0.1, 0.1, 0.1, 0.1, 0.1], dict(divergence_threshold=2.0)),
    "check_finite": ([0.5, NAN, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1], dict()),
    "not_finite_ignored": ([0.5, NAN, 0.6, 0.7, 0.1, 0.1, 0.1, 0.1], dict(check_finite=False, patience=3)),
}
scores, options = CASES[sys.argv[1]]
pl.seed_everything(3)
model = Regressor(val_scores=scores)
stopper = EarlyStopping(monitor="score", **options)
saver = ModelCheckpoint(dirpath="ckpts", monitor="score", mode=options.get("mode", "min"), save_last=True)
trainer = pl.Trainer(
    max_epochs=len(scores),
    limit_val_batches=1,
    enable_progress_bar=False,
    enable_model_summary=False,
    logger=False,
    callbacks=[stopper, saver],
)
trainer.fit(model, loader(16, 0), loader(4, 1))
record.put(
    "early_stopping",
    {
        "stopped_epoch": stopper.stopped_epoch,
        "stopping_reason": stopper.stopping_reason.name,
        "stopping_reason_message": stopper.stopping_reason_message,
        "wait_count": stopper.wait_count,
        "best_score": stopper.best_score,
        "min_delta": stopper.min_delta,
        "state_dict": stopper.state_dict(),
    },
)
record.put("current_epoch", trainer.current_epoch)
record.put("global_step", trainer.global_step)
record.put("files", sorted(p.name for p in Path("ckpts").iterdir()))
checkpoint_state(saver)
last = torch.load(saver.last_model_path, map_location="cpu", weights_only=True)
record.put("last_global_step", last["global_step"])  # last.ckpt is written when a top-k file is
record.weights("final", model)
