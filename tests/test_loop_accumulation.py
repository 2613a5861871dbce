"""Accumulation is defined once: k micro-batches of b give the same update as one batch of k*b."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

import surge


class Linear(surge.Module):
    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.lin = torch.nn.Linear(3, 1)
        self.steps_seen: list[int] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.lin(x), y)

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (1 + step))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def _data(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, 3, generator=g)
    return x, x @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.1 * torch.randn(n, 1, generator=g)


def _reference(x, y, b: int, k: int, epochs: int) -> tuple[torch.nn.Linear, int]:
    """A plain loop on big batches: each window of k micro-batches is one batch."""
    model = Linear()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (1 + step))
    steps = 0
    for _ in range(epochs):
        for start in range(0, len(x), b * k):
            xb, yb = x[start : start + b * k], y[start : start + b * k]
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(model.lin(xb), yb).backward()
            opt.step()
            sched.step()
            steps += 1
    return model, steps


def _fit(loader, k: int, epochs: int, tmp_path) -> tuple[Linear, surge.Trainer]:
    model = Linear()
    trainer = surge.Trainer(
        max_epochs=epochs,
        accumulate_grad_batches=k,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(model, loader)
    return model, trainer


@settings(max_examples=25, deadline=None)
@given(
    b=st.integers(1, 5),
    k=st.integers(1, 5),
    windows=st.integers(1, 4),
    partial=st.integers(0, 4),
    epochs=st.integers(1, 2),
)
def test_accumulated_windows_equal_one_big_batch(tmp_path_factory, b, k, windows, partial, epochs):
    partial = partial % k  # micro-batches in a final partial window (0: none)
    x, y = _data(b * (k * windows + partial))
    model, trainer = _fit(
        DataLoader(TensorDataset(x, y), batch_size=b), k, epochs, tmp_path_factory.mktemp("acc")
    )
    reference, steps = _reference(x, y, b, k, epochs)
    assert trainer.global_step == steps
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-6)


class Stream(IterableDataset):
    """Batches with no length: the last partial window is found only when the data runs out."""

    def __init__(self, x, y, b):
        self.x, self.y, self.b = x, y, b

    def __iter__(self):
        for start in range(0, len(self.x), self.b):
            yield self.x[start : start + self.b], self.y[start : start + self.b]


def test_partial_window_of_an_unsized_loader_is_the_mean_of_what_was_seen(tmp_path):
    b, k = 4, 3
    x, y = _data(b * (k * 2 + 2))  # two full windows, then 2 of 3 micro-batches
    model, trainer = _fit(DataLoader(Stream(x, y, b), batch_size=None), k, 1, tmp_path)
    reference, steps = _reference(x, y, b, k, 1)
    assert trainer.global_step == steps == 3
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-6)
