"""`lightning.fabric.utilities.seed`: `seed_everything`, `reset_seed` and the DataLoader workers'
`pl_worker_init_function`, as Lightning's."""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from ..seeding import seed_everything
from ..utilities.rank_zero import rank_zero_only

max_seed_value = 2**32 - 1
min_seed_value = 0
_MASK64 = (1 << 64) - 1


def reset_seed() -> None:
    """Seed again with what `seed_everything` last put in `PL_GLOBAL_SEED`/`PL_SEED_WORKERS`
    (nothing when it was never called)."""
    seed = os.environ.get("PL_GLOBAL_SEED")
    if seed is not None:
        seed_everything(int(seed), workers=bool(int(os.environ.get("PL_SEED_WORKERS", "0"))), verbose=False)


def pl_worker_init_function(worker_id: int, rank: int | None = None) -> None:
    """Seed torch, python and numpy in a DataLoader worker from the worker's base seed, its id and
    the process's rank, so no two workers of any process share a stream (Lightning's derivation)."""
    global_rank = rank if rank is not None else int(getattr(rank_zero_only, "rank", 0))
    base_seed = torch.initial_seed() - worker_id
    seeds = _seed_sequence(base_seed, worker_id, global_rank, count=4)
    torch.manual_seed(seeds[0])
    random.seed((seeds[1] << 32) | seeds[2])
    np.random.seed(np.random.SeedSequence([base_seed, worker_id, global_rank]).generate_state(4))


def _seed_sequence(base_seed: int, worker_id: int, global_rank: int, count: int) -> list[int]:
    """`count` 64-bit seeds: the three numbers packed into one, mixed by MurmurHash3's finaliser,
    then stepped by Knuth's MMIX linear congruential generator."""
    x = (base_seed << 32) | (worker_id << 16) | global_rank
    for multiplier in (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53):
        x ^= x >> 33
        x = (x * multiplier) & _MASK64
    x ^= x >> 33
    out = []
    for _ in range(count):
        x = (x * 6364136223846793005 + 1) & _MASK64
        out.append(x)
    return out


__all__ = ["max_seed_value", "min_seed_value", "pl_worker_init_function", "reset_seed", "seed_everything"]
