"""`lightning.fabric.utilities.data`: questions about loaders (`has_len`, `sized_len`, ...) and
`suggested_max_num_workers`."""

from __future__ import annotations

import os

from torch.utils.data import IterableDataset

from ...module.hparams import AttributeDict
from ..utilities.rank_zero import rank_zero_warn


def has_iterable_dataset(dataloader: object) -> bool:
    """Whether `dataloader.dataset` is an `IterableDataset`."""
    return isinstance(getattr(dataloader, "dataset", None), IterableDataset)


def sized_len(dataloader: object) -> int | None:
    """`len(dataloader)`, or None when it has no length."""
    try:
        return len(dataloader)  # type: ignore[arg-type]
    except (TypeError, NotImplementedError):
        return None


def has_len(dataloader: object) -> bool:
    """Whether `dataloader` has a length; warns, as Lightning, about a length of 0 and about a
    length on an `IterableDataset`'s loader."""
    length = sized_len(dataloader)
    if length == 0:
        rank_zero_warn(
            f"`{type(dataloader).__name__}` returned 0 length. Please make sure this was your intention."
        )
    if length is not None and has_iterable_dataset(dataloader):
        rank_zero_warn(
            "Your `IterableDataset` has `__len__` defined. In combination with multi-process data loading "
            "(when num_workers > 1), `__len__` could be inaccurate if each worker is not configured "
            "independently to avoid having duplicate data."
        )
    return length is not None


def suggested_max_num_workers(local_world_size: int) -> int:
    """An upper bound for `num_workers`: the CPUs this process may use, shared by the processes of
    this machine, less one for each main process (at least 1)."""
    if local_world_size < 1:
        raise ValueError(f"`local_world_size` should be >= 1, got {local_world_size}.")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cpus // local_world_size - 1)


__all__ = ["AttributeDict", "has_iterable_dataset", "has_len", "sized_len", "suggested_max_num_workers"]
