"""The ranks of one data-parallel replica read the same batches: its tensor-parallel ranks (DTensor
takes their inputs as replicated) and its pipeline stages (the first stage's inputs and the last
stage's targets must be the same samples). surge's sampler gives them the same coordinates, but a
loader it does not shard (`use_distributed_sampler=False`, a sampler of the user's, a shuffle seeded
by each process's own RNG) can hand them different samples, and training then goes on, wrong and
silent. So the first batch of each epoch is compared across the ranks: a fingerprint of its tensors,
gathered once per epoch (a few numbers per rank), and a mismatch stops every rank with the fix."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_leaves

from ..errors import SurgeRuntimeError


def fingerprint(batch: Any) -> list[float]:
    """Per tensor in the batch: its size, the sum of its values and the sum weighted by position
    (so that the same samples in another order differ), in float64; one host read per tensor."""
    out: list[float] = []
    for leaf in tree_leaves(batch):
        if isinstance(leaf, Tensor):
            flat = torch.nan_to_num(leaf.detach().reshape(-1).to(torch.float64))
            position = torch.arange(1, flat.numel() + 1, dtype=torch.float64, device=flat.device)
            out += [float(flat.numel()), *torch.stack([flat.sum(), (flat * position).sum()]).tolist()]
    return out


def replica_mismatches(prints: list[list[float]], replica_of: Callable[[int], int]) -> list[tuple[int, int]]:
    """(first rank of a replica, a rank of it whose batch differs from that rank's), for every replica."""
    first: dict[int, int] = {}
    differ = []
    for rank, mine in enumerate(prints):
        lead = first.setdefault(replica_of(rank), rank)
        if lead != rank and not _same(prints[lead], mine):
            differ.append((lead, rank))
    return differ


def _same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(x == y or abs(x - y) <= 1e-9 * max(abs(x), abs(y)) for x, y in zip(a, b))


def checked_first(step: Callable[..., Any], check: Callable[[Any], None]) -> Callable[..., Any]:
    """`step`, with `check(batch)` run before its first call (once per epoch: the loop asks anew)."""
    pending = [True]

    def run(batch: Any, *args: Any) -> Any:
        if pending[0]:
            pending[0] = False
            check(batch)
        return step(batch, *args)

    return run


def mismatch_error(owner: str, pairs: list[tuple[int, int]], roles: str) -> SurgeRuntimeError:
    shown = ", ".join(f"rank {a} and rank {b}" for a, b in pairs[:4])
    return SurgeRuntimeError(
        f"{owner}: the ranks of one data-parallel replica ({roles}) read different batches at this epoch's "
        f"first batch ({shown}); they must read the same samples, or the model trains on mismatched inputs "
        "and targets without a word. Keep use_distributed_sampler=True (surge gives them the same "
        "data-parallel coordinates), or give your sampler num_replicas and rank from "
        "trainer.strategy.distributed_sampler_kwargs and shuffle with a generator seeded alike on every "
        "rank (DataLoader(..., generator=torch.Generator().manual_seed(seed)))."
    )
