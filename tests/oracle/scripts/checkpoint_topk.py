"""ModelCheckpoint over 4 epochs with validation, one configuration per argument:
  step      monitor="step", top 2, every 3 optimizer steps
  epoch     monitor="epoch", top 2 (mode max)
  val_loss  monitor="val_loss", top 2, save_last, filename template with auto_insert_metric_name
  stepwise  a step-level metric (train_loss_step), every 2 steps, logger=False
  logged    the same with a CSVLogger that writes every 50 steps (log_every_n_steps)
The files kept, the callback's attributes, callback_metrics after fit/validate/test, and the
weights in the best file are recorded."""

import sys
from pathlib import Path

import lightning.pytorch as pl
import record
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from regressor import Regressor, checkpoint_state, loader

CASES = {
    "step": dict(monitor="step", mode="max", save_top_k=2, every_n_train_steps=3),
    "epoch": dict(monitor="epoch", mode="max", save_top_k=2),
    "val_loss": dict(monitor="val_loss", save_top_k=2, save_last=True, filename="{epoch:02d}-{val_loss:.3f}"),
    "stepwise": dict(monitor="train_loss_step", save_top_k=2, every_n_train_steps=2),
    "logged": dict(monitor="train_loss_step", save_top_k=2, every_n_train_steps=2),
}
case = sys.argv[1]
lr = 0.2 if case == "val_loss" else 0.05  # a large rate: val_loss goes up and down
pl.seed_everything(3)
model = Regressor(lr=lr)
callback = ModelCheckpoint(dirpath="ckpts", **CASES[case])
steps = []


class Steps(pl.Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        steps.append([trainer.global_step, float(outputs["loss"])])


trainer = pl.Trainer(
    max_epochs=4,
    limit_val_batches=2,
    enable_progress_bar=False,
    enable_model_summary=False,
    logger=CSVLogger("logs") if case == "logged" else False,
    callbacks=[callback, Steps()],
)
train, val = loader(24, 0), loader(8, 1)
trainer.fit(model, train, val)
record.put("files", sorted(p.name for p in Path("ckpts").iterdir()))
checkpoint_state(callback)
record.put("train_losses", steps)
record.put("after_fit", record.metrics(trainer))
record.weights("final", model)
if callback.best_model_path:
    best = torch.load(callback.best_model_path, map_location="cpu", weights_only=True)
    record.put("best_global_step", best["global_step"])
    restored = Regressor()
    restored.load_state_dict(best["state_dict"])
    record.weights("best", restored)
if callback.last_model_path:
    record.put("last_global_step", torch.load(callback.last_model_path, weights_only=True)["global_step"])
trainer.validate(model, val)
record.put("after_validate", record.metrics(trainer))
trainer.test(model, val)
record.put("after_test", record.metrics(trainer))
