"""The loaders a stage iterates: the user's DataLoader itself, or, where a setting must change, a
re-created one. The user's loader object is never changed."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from torch.utils.data import BatchSampler, DataLoader, IterableDataset, SequentialSampler

from ..launch.signals import WorkerSignals
from ..rank_zero import warn
from ..seed import worker_init_fn
from . import clone_loader
from .worker_count import quiet_iterators, seen_by_user


def prepare_loader(loader: Iterable, pin_memory: bool = False, seed_workers: bool = False) -> Iterable:
    """The loader a stage iterates: the user's own when nothing needs changing, else a re-created one
    with the changes (the user's loader is never changed).

    Workers leave preemption signals to the main process and, with `seed_workers`
    (`seed_everything(workers=True)`), get per-worker numpy/python seeds; on CUDA host memory is
    pinned so `non_blocking` copies overlap compute (unless the loader pins already).
    """
    if not isinstance(loader, DataLoader):
        return loader
    changes: dict[str, Any] = {}
    if loader.num_workers > 0 and not isinstance(loader.worker_init_fn, WorkerSignals):
        user_fn = loader.worker_init_fn
        changes["worker_init_fn"] = WorkerSignals(
            worker_init_fn if user_fn is None and seed_workers else user_fn
        )
    if pin_memory and not loader.pin_memory:
        changes["pin_memory"] = True
    return recreate_loader(loader, **changes) if changes else loader


def recreate_loader(loader: DataLoader, **changes: Any) -> DataLoader:
    """`loader` with `changes`, its sampler (or batch sampler) kept; the user's loader is untouched.

    A plain DataLoader is re-created from its arguments (`clone_loader`). A subclass may take other
    constructor arguments, so it is copied instead, and the copy changed.
    """
    if type(loader) is not DataLoader:
        copied = copy.copy(loader)
        if seen_by_user(loader.num_workers, changes.get("num_workers", loader.num_workers)):
            quiet_iterators(copied)  # torch's worker-count warning: the user's DataLoader(...) said it
        copied.__dict__["_iterator"] = None  # the user's running workers stay the user's
        for name, value in changes.items():
            setattr(copied, name, value)
        return copied
    if not isinstance(loader.dataset, IterableDataset):
        batches = loader.batch_sampler
        plain = type(batches) is BatchSampler and batches.sampler is loader.sampler and loader.batch_size
        if batches is None or plain:  # batch_size and drop_last come with clone_loader
            changes.setdefault("sampler", loader.sampler)
        else:
            changes.setdefault("batch_sampler", batches)
    return clone_loader(loader, **changes)


def in_order(loader: Iterable, why: str, prefix: str = "train") -> Iterable:
    """`loader` (fit's `prefix` loader: "train" or "val") reading its dataset in order (a
    SequentialSampler) when its sampler is any other, said in Lightning's words."""
    if (
        not isinstance(loader, DataLoader)
        or isinstance(loader.sampler, SequentialSampler)
        or isinstance(loader.dataset, IterableDataset)  # a stream has its own order
    ):
        return loader
    if not (type(loader.batch_sampler) is BatchSampler and loader.batch_sampler.sampler is loader.sampler):
        warn(f"{why}: the {prefix} dataloader's own batch sampler decides its order; surge keeps it")
        return loader
    warn(
        f"You requested to overfit but enabled {prefix} dataloader shuffling. We are turning off the {prefix} "
        "dataloader shuffling for you."
    )
    return recreate_loader(loader, sampler=SequentialSampler(loader.dataset))  # type: ignore[arg-type]
