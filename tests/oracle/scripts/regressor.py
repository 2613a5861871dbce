"""A small regression model and data made up front (the same draws under both frameworks), for the
checkpointing scripts; `VAL_SCORES` scripts the logged validation value per epoch when set."""

import os

import lightning.pytorch as pl
import record
import torch
from torch.utils.data import DataLoader, TensorDataset


def loader(n, seed, batch_size=4):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    y = x.sum(1, keepdim=True) + 0.5 * torch.randn(n, 1, generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=batch_size)


class Regressor(pl.LightningModule):
    def __init__(self, lr=0.05, val_scores=None):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
        self.lr = lr
        self.val_scores = val_scores

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("val_loss", loss)
        if self.val_scores is not None:
            self.log("score", float(self.val_scores[self.current_epoch]))

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", torch.nn.functional.mse_loss(self.layer(x), y), on_step=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def relative(path, root=None):
    """A checkpoint path as a name relative to the run's directory ('' stays '')."""
    if not path:
        return path
    return os.path.relpath(os.path.realpath(path), os.path.realpath(root or record.DIR))


def checkpoint_state(cb, key="checkpoint"):
    """What a ModelCheckpoint says after a fit: paths relative, scores as numbers."""
    record.put(
        key,
        {
            "best_model_path": relative(cb.best_model_path),
            "best_model_score": cb.best_model_score,
            "current_score": cb.current_score,
            "kth_best_model_path": relative(cb.kth_best_model_path),
            "last_model_path": relative(cb.last_model_path),
            "best_k_models": {relative(k): v for k, v in sorted(cb.best_k_models.items())},
        },
    )
