"""A resume with reload_dataloaders_every_n_epochs whose epoch's loader, requested again, is shorter
than the checkpoint's position in that epoch: refused before any step, naming both."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import surge
from surge.errors import CheckpointError


class Growing(surge.Module):
    """Epoch e trains on 16 + 8e samples in batches of 4; `shrunk`: 8 samples whatever the epoch."""

    def __init__(self, shrunk: bool = False) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)
        self.shrunk, self.steps = shrunk, 0

    def train_dataloader(self) -> DataLoader:
        n = 8 if self.shrunk else 16 + 8 * self.current_epoch
        x = torch.randn(n, 4, generator=torch.Generator().manual_seed(self.current_epoch))
        return DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=4)

    def training_step(self, batch, batch_idx):
        self.steps += 1
        x, y = batch
        return F.cross_entropy(self.lin(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _trainer(root, **kw) -> surge.Trainer:
    return surge.Trainer(
        default_root_dir=root, logger=False, enable_progress_bar=False, enable_model_summary=False,
        reload_dataloaders_every_n_epochs=1, max_epochs=4, **kw,
    )  # fmt: skip


def test_a_resume_position_the_new_loader_cannot_hold_is_refused(tmp_path):
    first = _trainer(tmp_path / "part", max_steps=14)  # epochs of 4, 6, 8 batches: 4 into epoch 2
    first.fit(Growing())
    model = Growing(shrunk=True)  # epoch 2's loader now has 2 batches
    trainer = _trainer(tmp_path / "resumed")
    with pytest.raises(
        CheckpointError, match="after batch 4 of epoch 2, but the train dataloader .* has 2 batches"
    ):
        trainer.fit(model, ckpt_path=first.checkpoint_callback.best_model_path)
    assert model.steps == 0 and trainer.global_step == 14
