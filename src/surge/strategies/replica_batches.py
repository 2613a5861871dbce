"""The ranks of one data-parallel replica read the same batches: its tensor-parallel ranks (DTensor
takes their inputs as replicated) and its pipeline stages (the first stage's inputs and the last
stage's targets must be the same samples). surge's sampler gives them the same coordinates, but a
loader it does not shard (`use_distributed_sampler=False`, a sampler of the user's, a shuffle seeded
by each process's own RNG) can hand them different samples, and training then goes on, wrong and
silent. So the first batch of each training epoch, and of each validation, test or predict run,
is compared across the ranks: a fingerprint of its tensors,
gathered once per epoch (a few numbers per rank), and a mismatch stops every rank with the fix."""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_leaves

from ..errors import SurgeRuntimeError


def fingerprint(batch: Any) -> list[float]:
    """Per tensor in the batch: its size, the sum of its values and the sum weighted by position
    (so that the same samples in another order differ), in float64; one host read per tensor. A
    string counts by its CRC, a dataclass by its fields; other non-tensor leaves are not compared."""
    out: list[float] = []
    for leaf in _leaves(batch):
        if isinstance(leaf, str):
            out.append(float(zlib.crc32(leaf.encode("utf-8", "surrogatepass"))))
            continue
        for part in _strided(leaf):
            flat = torch.nan_to_num(part.detach().reshape(-1).to(torch.float64))
            position = torch.arange(1, flat.numel() + 1, dtype=torch.float64, device=flat.device)
            out += [float(flat.numel()), *torch.stack([flat.sum(), (flat * position).sum()]).tolist()]
    return out


def _leaves(batch: Any) -> list[Any]:
    found = []
    for leaf in tree_leaves(batch):
        if dataclasses.is_dataclass(leaf) and not isinstance(leaf, type):
            found += _leaves([getattr(leaf, f.name) for f in dataclasses.fields(leaf)])
        elif isinstance(leaf, Tensor | str):
            found.append(leaf)
    return found


def _strided(tensor: Tensor) -> list[Tensor]:
    """Dense tensors that hold `tensor`'s values: a sparse one's indices and values, a nested one's
    components, a complex one's real and imaginary parts."""
    if tensor.is_nested:
        return [p for t in tensor.unbind() for p in _strided(t)]
    if tensor.layout != torch.strided:
        coo = tensor.detach().to_sparse().coalesce()  # any sparse layout, in one canonical order
        return [coo.indices(), *_strided(coo.values())]
    return [torch.view_as_real(tensor)] if tensor.is_complex() else [tensor]


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
    # NaN: a sum where the batch holds both infinities (the same on every rank, so alike)
    return len(a) == len(b) and all(
        x == y or (math.isnan(x) and math.isnan(y)) or abs(x - y) <= 1e-9 * max(abs(x), abs(y))
        for x, y in zip(a, b)
    )


def checked_first(step: Callable[..., Any], check: Callable[[Any], None]) -> Callable[..., Any]:
    """`step`, with `check(batch)` run before its first call (once per epoch: the loop asks anew)."""
    pending = [True]

    def run(batch: Any, *args: Any) -> Any:
        if pending[0]:
            pending[0] = False
            check(batch)
        return step(batch, *args)

    return run


def mismatch_error(owner: str, pairs: list[tuple[int, int]], roles: str, where: str) -> SurgeRuntimeError:
    shown = ", ".join(f"rank {a} and rank {b}" for a, b in pairs[:4])
    return SurgeRuntimeError(
        f"{owner}: the ranks of one data-parallel replica ({roles}) read different batches at {where} "
        f"({shown}); they must read the same samples, or the model runs on mismatched inputs and "
        "targets without a word. Keep use_distributed_sampler=True (surge gives them the same "
        "data-parallel coordinates), or give your sampler num_replicas and rank from "
        "trainer.strategy.distributed_sampler_kwargs and shuffle with a generator seeded alike on every "
        "rank (DataLoader(..., generator=torch.Generator().manual_seed(seed)))."
    )
