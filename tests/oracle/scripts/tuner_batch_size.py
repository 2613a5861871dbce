"""A project that tunes its batch size with `Tuner.scale_batch_size` before training: the size each
search settles on, where it is set, and the loaders the trainer holds afterwards."""

import sys

import lightning.pytorch as pl
import record
import torch
from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset
from lightning.pytorch.tuner import Tuner
from torch.utils.data import DataLoader


class Model(BoringModel):
    def __init__(self, batch_size=2, length=48):
        super().__init__()
        self.save_hyperparameters()
        self.length = length

    def train_dataloader(self):
        return DataLoader(RandomDataset(32, self.length), batch_size=self.hparams.batch_size)

    def val_dataloader(self):
        return DataLoader(RandomDataset(32, self.length), batch_size=self.hparams.batch_size)

    def test_dataloader(self):
        return DataLoader(RandomDataset(32, self.length), batch_size=self.hparams.batch_size)

    def predict_dataloader(self):
        return DataLoader(RandomDataset(32, self.length), batch_size=self.hparams.batch_size)


def trainer():
    return pl.Trainer(
        max_epochs=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
    )


cases = {
    "power": {"mode": "power", "steps_per_trial": 1},
    "binsearch": {"mode": "binsearch", "steps_per_trial": 1},
    "binsearch_two_trials": {"mode": "binsearch", "init_val": 4, "max_trials": 2, "steps_per_trial": 1},
    "power_from_17": {"mode": "power", "init_val": 17, "max_trials": 2, "steps_per_trial": 1},
    "power_max_val": {"mode": "power", "max_val": 8, "steps_per_trial": 1},
    "no_trials": {"mode": "power", "max_trials": 0},
    "validate": {"method": "validate", "max_trials": 4},
    "test": {"method": "test", "mode": "binsearch", "max_trials": 3},
    "predict": {"method": "predict", "init_val": 5, "max_trials": 2},
}
only = sys.argv[1:] or list(cases)
for name in only:
    pl.seed_everything(1)
    model = Model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    t = trainer()
    found = Tuner(t).scale_batch_size(model, **cases[name])
    record.put(f"{name}.found", found)
    record.put(f"{name}.hparams", model.hparams.batch_size)
    record.put(f"{name}.train_loader_batch_size", getattr(t.train_dataloader, "batch_size", None))
    if cases[name].get("method", "fit") == "fit":  # (after an evaluation method's search: docs/lightning.md)
        record.put(f"{name}.val_loader_batch_size", getattr(t.val_dataloaders, "batch_size", None))
    record.put(f"{name}.callbacks", [type(cb).__name__ for cb in t.callbacks])
    record.put(f"{name}.global_step", t.global_step)
    record.put(
        f"{name}.weights_restored", all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    )
    t.fit(model)
    record.put(f"{name}.fit_steps", t.global_step)
