"""DataLoaders: resolving them from the user's objects, limiting them, and moving batches."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from typing import Any, TypeGuard, cast

import torch
from torch import Tensor
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    Sampler,
)

from ..errors import MisconfigurationError, SurgeTypeError
from ..rank_zero import info, warn
from .dataset_rng import draws_random_numbers
from .stateful_loader import loader_class
from .worker_count import built_quietly, seen_by_user


def apply_to_tensors(batch: Any, fn: Callable[[Tensor], Any]) -> Any:
    """Apply `fn` to every tensor in a nested batch, keeping container types.

    Tuples, lists, dicts, namedtuples and dataclasses are rebuilt; other objects pass through.
    """
    if isinstance(batch, Tensor):
        return fn(batch)
    if isinstance(batch, Mapping):
        mapped = {k: apply_to_tensors(v, fn) for k, v in batch.items()}
        kind: Any = type(batch)  # a Mapping subclass, built from a dict
        return mapped if kind is dict else kind(mapped)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(apply_to_tensors(v, fn) for v in batch))
    if isinstance(batch, list | tuple):
        return type(batch)(apply_to_tensors(v, fn) for v in batch)
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        changes = {
            f.name: apply_to_tensors(getattr(batch, f.name), fn) for f in dataclasses.fields(batch) if f.init
        }
        return dataclasses.replace(batch, **changes)
    return batch


def move_to_device(batch: Any, device: torch.device) -> Any:
    """Move every tensor in a nested batch to `device` with `non_blocking=True`."""
    return apply_to_tensors(batch, lambda t: t.to(device, non_blocking=True))


def cast_floating(batch: Any, dtype: torch.dtype) -> Any:
    """Cast every floating-point tensor in a nested batch to `dtype`."""
    return apply_to_tensors(batch, lambda t: t.to(dtype) if t.is_floating_point() else t)


def is_single_loader(loaders: Any) -> bool:
    """Whether `loaders` is one loader, not a sequence of them (None is neither). As Lightning reads it, a
    non-empty sequence with no iterable item (`[0]`, `[1, 2]`) is one loader whose batches are its items."""
    if loaders is None:
        return False
    if isinstance(loaders, DataLoader) or not isinstance(loaders, Sequence):
        return True
    return len(loaders) > 0 and not any(hasattr(item, "__iter__") for item in loaders)


def as_loader_list(loaders: Any, arg: str) -> list[Iterable]:
    """A single loader or a sequence of them, as a list; None gives []."""
    if loaders is None:
        return []
    if is_single_loader(loaders):
        loaders = [loaders]
    for loader in loaders:
        if not hasattr(loader, "__iter__"):
            raise SurgeTypeError(
                f"{arg} must be a DataLoader or an iterable of batches, got {type(loader).__name__}"
            )
    return list(loaders)


def loader_length(loader: Iterable) -> int | None:
    """The number of batches, or None for iterables without a length."""
    try:
        return len(loader)  # type: ignore[arg-type]
    except (TypeError, NotImplementedError):
        return None


def limit_batches(loader: Iterable, limit: int | float, arg: str) -> int | float:
    """How many batches of `loader` to use per epoch under `limit_*_batches` (inf when unknown).
    A CombinedLoader's batches have the limit applied to each of its loaders already."""
    fixed = getattr(loader, "limited_batches", None)
    if fixed is not None:
        return fixed
    length = loader_length(loader)
    if isinstance(limit, int):
        return limit if length is None else min(limit, length)
    if length is None:
        if limit == 1.0:
            return math.inf
        raise MisconfigurationError(
            f"{arg}={limit} is a fraction, but the dataloader has no length; pass an int number of batches."
        )
    batches = int(length * limit)
    if limit > 0 and batches == 0 and length > 0:
        raise MisconfigurationError(
            f"{arg}={limit} of {length} batches is less than one batch; use a larger fraction or an int."
        )
    return batches


def data_wait_advice(loader: Iterable, wait_s: float, total_s: float, steps: int) -> None:
    """Warn once when the step mostly waits for data and the loader loads in the main process.

    Measured with two clock reads around `next()` per step, summed; nothing is synchronised.
    """
    if not isinstance(loader, DataLoader) or loader.num_workers > 0 or total_s <= 0 or steps == 0:
        return
    share = wait_s / total_s
    if share < 0.3 or wait_s / steps < 1e-3:
        return  # below ~1 ms a batch, passing batches between worker processes costs about as much
    warn(  # the doctor's advice too (profiler="simple"), which measures the worker counts
        f"The training step waited for data {share:.0%} of the time ({1e3 * wait_s / steps:.2f} ms of "
        f"{1e3 * total_s / steps:.2f} ms per step) with DataLoader(num_workers=0). "
        'Trainer(num_workers="auto") measures whether loading in worker processes is faster and uses the '
        "best count; where it is not (the work is CPU-bound and the cores are busy), preprocess once: "
        "surge.data.cache(dataset, path)."
    )


class _SkipFirst:
    """A batch sampler that yields its inner sampler's batches after the first `skip` (indices only).

    `rng`, when set before the first iteration, is the RNG state (python, numpy, torch) the inner
    sampler draws from: the state it had at that point of the interrupted run.
    """

    def __init__(self, batch_sampler: Any, skip: int) -> None:
        self.batch_sampler, self.skip = batch_sampler, skip
        self.rng: dict[str, Any] | None = None
        self.started = False

    def __iter__(self) -> Iterator[Any]:
        from ..seed import rng_state, set_rng_state

        self.started = True
        current = None
        if self.rng is not None:
            current = rng_state()
            set_rng_state(self.rng)
        it = iter(self.batch_sampler)
        exhausted = any(next(it, None) is None for _ in range(self.skip))
        if current is not None:
            set_rng_state(current)
        if not exhausted:
            yield from it

    def __len__(self) -> int:
        return max(0, len(self.batch_sampler) - self.skip)


def resume_iterator(
    loader: Iterable,
    skip: int,
    epoch_start_rng: dict[str, Any] | None,
    later_epoch: bool = False,
    by_index: bool = False,
) -> Iterator[Any]:
    """An iterator over `loader` that continues after `skip` batches of an interrupted epoch.

    With the RNG state from the epoch's start (global RNGs and the loader's own generators), the
    sampler draws the same permutation (and the workers the same seeds) as the interrupted run:
    the DataLoader draws its workers' base seed, then the sampler its permutation, in that order.
    Map-style DataLoaders skip at the index level: the dataset's `__getitem__` is never called for
    the skipped samples. Where skipping would change what later samples are (an IterableDataset's
    stream, or random augmentation drawn in worker processes), the skipped batches are loaded again
    and dropped, so the data continues exactly. `by_index` skips by index wherever a batch sampler
    allows, for a loader whose workers' random streams need not continue a previous run's.
    """
    from ..seed import rng_state, set_rng_state
    from .loader_state import restore_epoch_start

    now = rng_state()
    if epoch_start_rng is not None:
        set_rng_state(epoch_start_rng)
        restore_epoch_start(loader, epoch_start_rng)
    how = "skip" if by_index and skip and _by_index(loader) else _resume_mode(loader, skip)
    it: Iterator[Any]
    if how == "skip":
        skipper = _SkipFirst(loader.batch_sampler, skip)  # type: ignore[attr-defined]
        it = iter(clone_loader(loader, batch_sampler=skipper))  # type: ignore[arg-type]
        if not skipper.started:  # single-process loading: the sampler starts at the first next()
            skipper.rng = rng_state()
    else:
        it = iter_without_worker_seed_draw(loader) if later_epoch and starts_workers(loader) else iter(loader)
        if skip:
            info(f"resuming inside an epoch: loading the {skip} batches already trained on again ({how})")
            for _ in range(skip):
                next(it, None)
    set_rng_state(now)
    return it


def _by_index(loader: Iterable) -> bool:
    return (
        isinstance(loader, DataLoader)
        and loader.batch_sampler is not None
        and not isinstance(loader.dataset, IterableDataset)
        and not (loader.num_workers > 0 and loader.persistent_workers)
    )


def _resume_mode(loader: Iterable, skip: int) -> str:
    """ "skip" (by index, nothing loaded) or why the skipped batches must be loaded again."""
    if not skip:
        return "replay"
    if hasattr(loader, "combined"):  # a CombinedLoader's batches
        return "a CombinedLoader's loaders are read again from the epoch's start, in step"
    if not isinstance(loader, DataLoader) or loader.batch_sampler is None:
        return f"a {type(loader).__name__} has no batch sampler to skip by index"
    if isinstance(loader.dataset, IterableDataset):
        return "an IterableDataset's stream can only be read in order"
    if loader.num_workers > 0 and loader.persistent_workers:
        return "persistent workers serve the later epochs too, so the loader itself must be used"
    if loader.num_workers > 0 and draws_random_numbers(loader.dataset):
        return (
            "the dataset draws random numbers in its worker processes, whose streams must advance as before"
        )
    return "skip"


def starts_workers(loader: Iterable) -> TypeGuard[DataLoader]:
    """Whether iterating `loader` now starts persistent workers (they are not running yet)."""
    return (
        isinstance(loader, DataLoader)
        and loader.num_workers > 0
        and loader.persistent_workers
        and getattr(loader, "_iterator", None) is None
    )


def iter_without_worker_seed_draw(loader: DataLoader) -> Iterator[Any]:
    """Start `loader`'s persistent workers without drawing their base seed from the run's RNG.

    An uninterrupted run drew that seed once, in its first epoch; later epochs only reset the
    workers. A run resumed in a later epoch must not draw it again, or the sampler's draws that
    follow (from the global RNG or the loader's generator) would shift. The seed is drawn from a
    throwaway generator instead, so worker-side random streams differ from the interrupted run's
    (surge says so when such a checkpoint is written).
    """
    own = loader.generator
    loader.generator = torch.Generator().manual_seed(0)
    try:
        return iter(loader)
    finally:
        loader.generator = own


def stop_persistent_workers(loaders: Iterable[Any]) -> None:
    """End the persistent workers a stage started, when the stage ends.

    The Trainer, its loops and the module refer to each other, so a loader held by a Trainer is
    freed by the garbage collector, which may close the workers' queues before the iterator sends
    them its stop signal: each worker then costs a 5 s wait and a kill. Dropping the iterator here
    stops them at once; a later `iter(loader)` starts new ones.
    """
    from .combined import inner_loaders

    for loader in (inner for outer in loaders for inner in inner_loaders(outer)):
        if isinstance(loader, DataLoader) and getattr(loader, "_iterator", None) is not None:
            loader._iterator = None


def clone_loader(loader: DataLoader, **overrides: Any) -> DataLoader:
    """A new DataLoader with the user's settings, changed by `overrides` (the user's is untouched).

    surge re-creates loaders explicitly, from their arguments, rather than patching DataLoader.
    """
    kwargs: dict[str, Any] = {
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
        "generator": loader.generator,
        "pin_memory_device": loader.pin_memory_device,
    }
    if loader.num_workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor
        kwargs["persistent_workers"] = loader.persistent_workers
    if "batch_sampler" not in overrides:
        kwargs.update(batch_size=loader.batch_size, drop_last=loader.drop_last)
    kwargs.update(overrides)
    if kwargs["num_workers"] == 0:  # worker-only options are an error without workers
        kwargs.pop("prefetch_factor", None)
        kwargs.pop("persistent_workers", None)
    cls, own = loader_class(loader)
    if seen_by_user(loader.num_workers, kwargs["num_workers"]):  # torch's warning: said once
        return built_quietly(lambda: cls(loader.dataset, **own, **kwargs))
    return cls(loader.dataset, **own, **kwargs)


class ShardSampler(Sampler[int]):
    """Indices rank, rank + world, ...: every sample exactly once over all ranks (no padding),
    so evaluation metrics are exact over the dataset for any world size."""

    def __init__(self, length: int, rank: int, world_size: int) -> None:
        self.length, self.rank, self.world_size = length, rank, world_size

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.rank, self.length, self.world_size))

    def __len__(self) -> int:
        return len(range(self.rank, self.length, self.world_size))


def _shardable(loader: Iterable) -> TypeGuard[DataLoader]:
    return (
        isinstance(loader, DataLoader)
        and not isinstance(loader.dataset, IterableDataset)
        and isinstance(loader.batch_sampler, BatchSampler)
        and loader.batch_sampler.sampler is loader.sampler
        and not isinstance(loader.sampler, DistributedSampler | ShardSampler)
    )


def distribute_train_loader(loader: Iterable, rank: int, world_size: int, seed: int) -> Iterable:
    """The loader with a DistributedSampler that keeps the user's shuffle and drop_last."""
    if not _shardable(loader):
        if isinstance(loader, DataLoader) and not isinstance(loader.sampler, DistributedSampler):
            warn(
                f"the train DataLoader ({type(loader.sampler).__name__} sampler) was not sharded: each rank "
                "sees all of it; give it a DistributedSampler or use a standard sampler"
            )
        return loader
    shuffle = isinstance(loader.sampler, RandomSampler)
    sampler: DistributedSampler[int] = DistributedSampler(
        loader.dataset,
        num_replicas=world_size,
        rank=rank,
        shuffle=shuffle,
        seed=seed,
        drop_last=loader.drop_last,
    )
    return clone_loader(loader, sampler=sampler)


def distribute_eval_loader(loader: Iterable, rank: int, world_size: int) -> Iterable:
    """The loader with a `ShardSampler`: no sample is seen twice, none is missed."""
    if not _shardable(loader) or isinstance(loader.sampler, RandomSampler):
        return loader
    length = len(cast(Sized, loader.dataset))  # map-style (shardable): it has a length
    return clone_loader(loader, sampler=ShardSampler(length, rank, world_size))


# `surge.data.cache(dataset, path)`: re-exported here; cached.py needs nothing from this module.
from .cached import CachedDataset, CacheMismatchError, cache  # noqa: E402
from .combined import CombinedLoader  # noqa: E402

__all__ = [
    "CacheMismatchError",
    "CachedDataset",
    "CombinedLoader",
    "cache",
]  # the public API (the rest serves the loops)
