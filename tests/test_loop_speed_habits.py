"""The hot loop's habits: no host reads per step, no retained graphs, exact epoch means."""

from __future__ import annotations

import gc
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, TensorDataset

import surge
from surge.rank_zero import SurgeWarning


class Logged(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("loss", loss, prog_bar=True, on_epoch=True)
        self.log("twice", loss * 2)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _loader(n: int = 64 * 100, batch_size: int = 64, shuffle: bool = True) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 32, generator=g)
    return DataLoader(
        TensorDataset(x, torch.randint(0, 10, (n,), generator=g)), batch_size=batch_size, shuffle=shuffle
    )


def _trainer(tmp_path, **kw) -> surge.Trainer:
    defaults = dict(
        default_root_dir=tmp_path,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
        accelerator="cpu",
    )
    return surge.Trainer(**{**defaults, **kw})


def test_logging_every_step_reads_the_host_only_at_intervals(tmp_path, host_reads):
    counts = host_reads
    trainer = _trainer(
        tmp_path,
        max_steps=500,
        log_every_n_steps=50,
        enable_progress_bar=True,
        callbacks=[surge.callbacks.ProgressBar(mode="lines", refresh_rate=3600)],
    )
    trainer.fit(Logged(), _loader())
    assert trainer.global_step == 500
    assert counts["item"] == 0
    # 10 log intervals + epoch ends (5 epochs of 100 steps, each: the step and epoch values the epoch-end
    # hooks read (the progress line's callback is one), then last step values, epoch values, the progress
    # line, the non-finite count, the progress bar's step values put in before the epoch's first published
    # value so its keys keep Lightning's order) - never per step.
    # ... and at each log interval, the non-finite watch's count (one small transfer of its own)
    assert counts["tolist"] <= 2 * (500 // 50) + 5 * 7
    rows = (Path(trainer.log_dir) / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    assert header == sorted(header, key=lambda n: (n.startswith("goodput/"), n))  # surge's own columns last
    assert "step" in rows[0] and len(rows) > 10


def test_logged_values_hold_no_graph_and_memory_stays_flat(tmp_path):
    live: dict[int, int] = {}

    class Count(surge.callbacks.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            if trainer.global_step in (500, 2000):
                gc.collect()
                tensors = sum(1 for o in gc.get_objects() if isinstance(o, torch.Tensor))
                # (less the non-finite watch's kept losses: fewer than 256, checked in tests/faults/test_nonfinite.py)
                live[trainer.global_step] = tensors - len(trainer._optim.guard._pending)
                slot = trainer._train_results.slots["loss"]
                assert slot.last.grad_fn is None and not slot.last.requires_grad
                assert slot.total.grad_fn is None

    trainer = _trainer(tmp_path, max_steps=2000, logger=False, callbacks=[Count()])
    trainer.fit(Logged(), _loader(n=64 * 200))
    assert set(live) == {500, 2000}
    assert live[2000] <= live[500]


class PerSample(surge.Module):
    """Logs the mean of per-sample values; the epoch value must be the exact mean over samples."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def training_step(self, batch, batch_idx):
        (x,) = batch
        self.log("train_value", x.mean(), on_step=False, on_epoch=True)
        return (self.w * x).sum() * 0 + self.w.sum() * 0

    def validation_step(self, batch, batch_idx):
        (x,) = batch
        self.log("value", x.mean())
        self.log("value_sum", x.sum(), reduce_fx="sum")
        self.log("value_max", x.max(), reduce_fx="max")

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def test_epoch_means_are_exact_weighted_means(tmp_path):
    values = torch.arange(10, dtype=torch.float32) ** 2  # batches of 4, 4, 2
    loader = DataLoader(TensorDataset(values), batch_size=4)
    trainer = _trainer(tmp_path, max_epochs=1, logger=False)
    trainer.fit(PerSample(), loader, loader)
    exact = values.mean().item()
    assert trainer.callback_metrics["train_value"].item() == pytest.approx(exact, rel=1e-6)
    result = trainer.validate(dataloaders=loader)[0]
    assert result["value"] == pytest.approx(exact, rel=1e-6)
    assert result["value"] != pytest.approx(
        torch.stack([values[:4].mean(), values[4:8].mean(), values[8:].mean()]).mean().item()
    )
    assert result["value_sum"] == pytest.approx(values.sum().item())
    assert result["value_max"] == pytest.approx(81.0)


class SlowDataset(Dataset):
    def __init__(self, n: int, delay: float) -> None:
        self.n, self.delay = n, delay

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        import time

        time.sleep(self.delay)
        return torch.randn(32), i % 10


def test_data_bound_step_warns_once_with_advice(tmp_path):
    loader = DataLoader(SlowDataset(120, 0.004), batch_size=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _trainer(tmp_path, max_epochs=1, logger=False).fit(Logged(), loader)
    advice = [
        w for w in caught if issubclass(w.category, SurgeWarning) and "waited for data" in str(w.message)
    ]
    assert len(advice) == 1
    assert "num_workers=" in str(advice[0].message)


def test_fast_data_gives_no_advice(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # Pre-made batches (no per-sample collation): fetching costs microseconds, even on a busy machine.
        x, y = torch.randn(100, 64, 32), torch.randint(0, 10, (100, 64))
        _trainer(tmp_path, max_epochs=1, logger=False).fit(
            Logged(), DataLoader(TensorDataset(x, y), batch_size=None)
        )
    assert not [w for w in caught if "waited for data" in str(w.message)]


def test_gradients_are_freed_after_each_step(tmp_path):
    model = Logged()
    _trainer(tmp_path, max_steps=5, logger=False).fit(model, _loader())
    assert all(p.grad is None for p in model.parameters())


class Manual(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.lin = torch.nn.Linear(32, 10)

    def training_step(self, batch, batch_idx):
        x, y = batch
        opt = self.optimizers()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.lin(x), y)
        self.manual_backward(loss)
        opt.step()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_manual_optimization_counts_steps_and_trains(tmp_path):
    model = Manual()
    before = model.lin.weight.detach().clone()
    trainer = _trainer(tmp_path, max_steps=7, logger=False)
    trainer.fit(model, _loader())
    assert trainer.global_step == 7
    assert not torch.equal(before, model.lin.weight)
