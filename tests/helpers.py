"""Shared test helpers: a tiny classifier, tiny loaders and a Trainer without side effects.

Import them with `from helpers import ...` (conftest.py puts this folder on sys.path).
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import surge

IN_DIM = 4
N_CLASSES = 2


class TinyModel(surge.Module):
    """Linear -> ReLU -> Linear classifier.

    Logs "train_loss" per step, "val_loss"/"val_acc" per validation epoch, "test_loss"/"test_acc".
    `val_history` holds this module's own batch-size-weighted mean val_loss of every validation
    that was not a sanity check. With `scripted_val_loss`, validation logs `scripted_val_loss[epoch]`
    as "val_loss" instead of the real loss (so a test knows the values exactly).
    """

    def __init__(
        self,
        in_dim: int = IN_DIM,
        hidden: int = 8,
        out_dim: int = N_CLASSES,
        lr: float = 0.1,
        scripted_val_loss: Sequence[float] | None = None,
        scheduler: str | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(in_dim, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, out_dim)
        )
        self.lr = lr
        self.scripted_val_loss = list(scripted_val_loss) if scripted_val_loss is not None else None
        self.scheduler = scheduler
        self.val_history: list[float] = []
        self._val_sum = 0.0
        self._val_count = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def _eval(self, batch: Any, prefix: str) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        acc = (logits.argmax(-1) == y).float().mean()
        self.log(f"{prefix}_loss", loss)
        self.log(f"{prefix}_acc", acc)
        return loss

    def on_validation_epoch_start(self) -> None:
        self._val_sum, self._val_count = 0.0, 0

    def validation_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        if self.scripted_val_loss is None:
            loss = self._eval(batch, "val")
        else:
            loss = F.cross_entropy(self(x), y)
            self.log("val_loss", torch.tensor(self.scripted_val_loss[self.current_epoch]))
        self._val_sum += float(loss) * len(x)
        self._val_count += len(x)
        return loss

    def on_validation_epoch_end(self) -> None:
        if not self.trainer.sanity_checking and self._val_count:
            if self.scripted_val_loss is None:
                self.val_history.append(self._val_sum / self._val_count)
            else:
                self.val_history.append(self.scripted_val_loss[self.current_epoch])

    def test_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._eval(batch, "test")

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=self.lr)
        if self.scheduler == "step_epoch":
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
            return {"optimizer": opt, "lr_scheduler": sched}
        if self.scheduler == "step_step":
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
        return opt


def make_model(**kwargs: Any) -> TinyModel:
    return TinyModel(**kwargs)


def make_dataset(n: int, in_dim: int = IN_DIM, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, in_dim, generator=g)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long()
    return TensorDataset(x, y)


def make_loaders(
    n_train: int = 32,
    n_val: int = 16,
    batch_size: int = 8,
    in_dim: int = IN_DIM,
    seed: int = 0,
) -> tuple[DataLoader, DataLoader]:
    """(train, val) loaders over random data; no shuffling, so every run sees the same batches."""
    train = DataLoader(make_dataset(n_train, in_dim, seed), batch_size=batch_size)
    val = DataLoader(make_dataset(n_val, in_dim, seed + 1), batch_size=batch_size)
    return train, val


FAST_DEFAULTS: dict[str, Any] = {
    "logger": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
    "enable_checkpointing": False,
    "accelerator": "cpu",
    "max_epochs": 1,
}


def fast_trainer(**kwargs: Any) -> surge.Trainer:
    """A Trainer without logger, progress bar, summary or checkpoints; any default can be overridden."""
    return surge.Trainer(**{**FAST_DEFAULTS, **kwargs})


def params_of(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of every parameter and buffer."""
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def same_params(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@contextlib.contextmanager
def small_filesystem(path: Path, size: str) -> Iterator[Path]:
    """A real tmpfs of `size` at `path` (needs root, as on CI); skips the test where it cannot mount."""
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill_disk(path: Path) -> None:
    """Write `path` until the filesystem under it has no room left."""
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass


class CompiledWatch(surge.callbacks.Callback):
    """Records, at each training batch, which modules (by name, "" the root) run through a compiled
    call: torch's slot for it filled on the module (compile=True and "regions" fill it for a stage)."""

    def __init__(self) -> None:
        self.compiled: set[str] = set()

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        self.compiled |= {name for name, m in module.named_modules() if "_compiled_call_impl" in vars(m)}
