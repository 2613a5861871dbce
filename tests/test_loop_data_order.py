"""The trainer sees the same batches in the same order as a plain `for` loop over the loader."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

import surge


class Recorder(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.seen: list[torch.Tensor] = []

    def training_step(self, batch, batch_idx):
        (x,) = batch
        self.seen.append(x.clone())
        return (self.w * x.float()).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def _loader() -> DataLoader:
    return DataLoader(
        TensorDataset(torch.arange(20)),
        batch_size=4,
        shuffle=True,
        generator=torch.Generator().manual_seed(5),
    )


def test_epochs_follow_a_plain_loop_with_a_user_generator(tmp_path):
    loader = _loader()
    expected = [x for _ in range(3) for (x,) in loader]
    model = Recorder()
    surge.Trainer(
        max_epochs=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    ).fit(model, _loader())
    assert len(model.seen) == len(expected) == 15
    assert all(torch.equal(a, b) for a, b in zip(model.seen, expected))
