"""Lightning's `seed_everything(seed=None, workers=False, verbose=True)` over surge's."""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator

import numpy as np
import torch

from .. import seed as _seed
from ..rank_zero import info, warn


def seed_everything(seed: int | None = None, workers: bool = False, verbose: bool = True) -> int:
    """Seed python, numpy and torch; returns the seed. As in Lightning: no seed means
    `PL_GLOBAL_SEED` from the environment, else 0 (with a warning); the seed and `workers` are put
    in `PL_GLOBAL_SEED`/`PL_SEED_WORKERS` for processes started later; `workers=True` seeds each
    DataLoader worker's numpy and python from torch's seed for it."""
    if seed is None:
        env = os.environ.get("PL_GLOBAL_SEED")
        if env is None:
            seed = 0
            warn("seed_everything(): no seed given and PL_GLOBAL_SEED is not set; seed set to 0")
        else:
            seed = int(env)
    elif not isinstance(seed, int):  # "12" or 12.0, as Lightning takes them
        seed = int(seed)
    _seed.seed_everything(seed, workers=workers)
    os.environ["PL_GLOBAL_SEED"] = str(seed)
    os.environ["PL_SEED_WORKERS"] = str(int(workers))
    if verbose:
        info(f"Seed set to {seed}")
    return seed


@contextlib.contextmanager
def isolate_rng(include_cuda: bool = True) -> Iterator[None]:
    """Run a block, then put torch's, numpy's and python's global random states back as they were
    (and CUDA's, with `include_cuda`; leave it False in a forked process, where CUDA cannot start)."""
    states = (torch.get_rng_state(), np.random.get_state(), random.getstate())
    cuda = (torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []) if include_cuda else None
    yield
    torch.set_rng_state(states[0])
    np.random.set_state(states[1])
    random.setstate(states[2])
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)
