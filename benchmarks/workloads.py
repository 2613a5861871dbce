"""Models, data and the loss shared by every contestant, so all of them train the identical thing.

Weights come from `build_model`, which seeds the global RNG itself; the data order comes from the
loader's own seeded generator. Every contestant therefore sees the same weights and the same
batches in the same order, whatever its framework does with the global RNG.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, Sampler, TensorDataset

SEED = 1234
BATCH = 64


@dataclass(frozen=True)
class Spec:
    """What a training workload trains on."""

    model: str  # "mlp", "mlp_wide", "blocks" or "cnn"
    log: bool  # whether framework contestants call self.log(..., prog_bar=True) every step
    batches_per_epoch: int  # dataset size in batches; longer fits run several epochs
    accumulate: int = 1  # micro-batches per optimizer step (gradient accumulation)


TRAINING = {
    "mlp": Spec("mlp", log=False, batches_per_epoch=500),
    "mlp_accum": Spec("mlp", log=False, batches_per_epoch=500, accumulate=4),
    "cnn": Spec("cnn", log=False, batches_per_epoch=100),
    "mlp_log": Spec("mlp", log=True, batches_per_epoch=500),
    "mlp_wide": Spec("mlp_wide", log=False, batches_per_epoch=500),
    "blocks": Spec("blocks", log=False, batches_per_epoch=500),
}
INPUT_SHAPE = {"mlp": (32,), "cnn": (1, 28, 28), "mlp_wide": (32,), "blocks": (32,)}
CLASSES = 10


def seed_everything(seed: int = SEED) -> None:
    """Seed Python, NumPy (if present) and torch."""
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass


class Block(nn.Module):
    """A pre-norm residual MLP block (a transformer layer without attention): LayerNorm, GELU and
    the residual add are memory-bound elementwise work that a compiler can fuse."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm, self.up, self.down = (
            nn.LayerNorm(width),
            nn.Linear(width, 2 * width),
            nn.Linear(2 * width, width),
        )

    def forward(self, x: Tensor) -> Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


def build_model(name: str) -> nn.Module:
    """The network for `name`, with weights drawn from a freshly seeded global RNG."""
    torch.manual_seed(SEED)
    if name == "mlp":
        return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, CLASSES))
    if name == "mlp_wide":  # the MLP: enough arithmetic per step for compiled kernels to matter
        return nn.Sequential(
            nn.Linear(32, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, CLASSES)
        )  # fmt: skip
    if name == "blocks":
        return nn.Sequential(
            nn.Linear(32, 128), *(Block(128) for _ in range(4)), nn.LayerNorm(128), nn.Linear(128, CLASSES)
        )
    if name == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 16, 3), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(32 * 5 * 5, CLASSES),
        )  # fmt: skip
    raise ValueError(f"unknown model {name!r}")


def make_optimizer(name: str, params: Iterable[Tensor]) -> torch.optim.Optimizer:
    """SGD(lr=0.1) for the MLPs, AdamW(lr=1e-3) for the residual blocks, Adam(lr=1e-3) for the CNN."""
    if name in ("mlp", "mlp_wide"):
        return torch.optim.SGD(params, lr=0.1)
    if name == "blocks":
        return torch.optim.AdamW(params, lr=1e-3)
    return torch.optim.Adam(params, lr=1e-3)


def compute_loss(net: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    """Cross-entropy of `net` on `(x, y)`."""
    x, y = batch
    return F.cross_entropy(net(x), y)


def _samples(name: str, n: int, seed: int) -> tuple[Tensor, Tensor]:
    """`n` learnable samples: a fixed random template per class plus Gaussian noise."""
    g = torch.Generator().manual_seed(seed)
    templates = torch.randn((CLASSES, *INPUT_SHAPE[name]), generator=torch.Generator().manual_seed(SEED))
    y = torch.randint(0, CLASSES, (n,), generator=g)
    x = templates[y] + 2.0 * torch.randn((n, *INPUT_SHAPE[name]), generator=g)
    return x, y


class EpochShuffle(Sampler[int]):
    """Shuffles like `shuffle=True`, but draws each epoch's permutation when the epoch starts.

    `RandomSampler` draws once more from its generator only when iterated to exhaustion, so a
    loop that stops after `len(loader)` batches (as the frameworks do) and one that runs into
    `StopIteration` (the raw `for` loop) would see different orders from the second epoch on.
    """

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.generator = n, torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        return iter(torch.randperm(self.n, generator=self.generator).tolist())


_datasets: dict[tuple[str, int], TensorDataset] = {}
# The collate function of every loader `make_loader` builds (None: torch's default). Only
# `lockstep_child.py` sets it, to its gate, which pauses the fit at every epoch's first batch.
COLLATE: Callable[[list[Any]], Any] | None = None


def make_loader(workload: str) -> DataLoader:
    """A fresh shuffling loader over the workload's dataset, in an order fixed by its own seeds."""
    spec = TRAINING[workload]
    key = (spec.model, spec.batches_per_epoch)
    if key not in _datasets:
        _datasets[key] = TensorDataset(*_samples(spec.model, BATCH * spec.batches_per_epoch, SEED + 1))
    dataset = _datasets[key]
    # The generator only feeds the loader's per-epoch base seed (for workers), off the global RNG.
    return DataLoader(
        dataset,
        batch_size=BATCH,
        sampler=EpochShuffle(len(dataset), SEED + 2),
        generator=torch.Generator().manual_seed(SEED + 4),
        collate_fn=COLLATE,
    )


def held_out_batch(workload: str) -> tuple[Tensor, Tensor]:
    """A fixed batch not in the training set, for the loss before and after the fit."""
    return _samples(TRAINING[workload].model, 4 * BATCH, SEED + 3)


@torch.no_grad()
def held_out_loss(net: nn.Module, batch: tuple[Tensor, Tensor]) -> float:
    """The loss on `batch`, without touching gradients (read outside the timed region)."""
    return compute_loss(net, batch).item()
