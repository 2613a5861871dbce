"""Seeding and the RNG states that a checkpoint carries."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .errors import bad_value


@dataclass(frozen=True)
class Seeding:
    """What `seed_everything` set: the seed (also the DistributedSampler's) and per-worker seeding."""

    seed: int
    workers: bool


_last: Seeding | None = None  # the last `seed_everything` in this process; see `last_seeding`


def seed_everything(seed: int, workers: bool = True) -> int:
    """Seed python, numpy and torch (all devices) with `seed`; `os.environ` is left alone.

    With `workers=True` the Trainer gives DataLoaders that have no `worker_init_fn` one that seeds
    numpy and python in each worker from torch's per-worker seed, so workers never share a stream.
    The Trainer reads what was set (`last_seeding`) when it prepares the loaders of a stage.
    """
    global _last
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise bad_value("seed", seed, "an int in [0, 2**32)")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    _last = Seeding(seed, workers)
    return seed


def last_seeding() -> Seeding | None:
    """What the last `seed_everything` call in this process set (None if there was none)."""
    return _last


def remember_seeding(seeding: Seeding | None) -> None:
    """Take `seeding` as this process's last `seed_everything` (a rank started by spawn gets the main
    process's)."""
    global _last
    _last = seeding


def worker_init_fn(worker_id: int) -> None:
    """Seed python and numpy in a DataLoader worker from torch's seed for it (base seed + worker id)."""
    seed = torch.initial_seed() % 2**32
    random.seed(seed)
    np.random.seed(seed)


def rng_state() -> dict[str, Any]:
    """Every RNG state a resumed run needs, in types `torch.load(weights_only=True)` accepts; each
    generator's words as one tensor (a checkpoint's checks and digest see one value, not 625)."""
    version, mt, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": {
            "version": version,
            "state": torch.from_numpy(np.array(mt, dtype=np.int64)),
            "gauss": gauss,
        },
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what `rng_state` captured (older checkpoints keep python's words as a list)."""
    py = state["python"]
    words = py["state"]
    words = words.tolist() if isinstance(words, torch.Tensor) else words
    random.setstate((py["version"], tuple(words), py["gauss"]))
    npst = state["numpy"]
    np.random.set_state(
        (npst["kind"], npst["keys"].numpy().astype(np.uint32), npst["pos"], npst["has_gauss"], npst["cached"])
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@contextlib.contextmanager
def rng_untouched() -> Iterator[dict[str, Any]]:
    """Run a block, then put every global RNG (python, numpy, torch, CUDA) back as it was; yields
    the state it will restore."""
    before = rng_state()
    try:
        yield before
    finally:
        set_rng_state(before)
