"""How many DataLoader workers: measure the loader's throughput at 0, 1, 2, ... workers, take the fewest near the best."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import DataLoader

from ..data import loader_length
from ..errors import SurgeTypeError, bad_value
from ..rank_zero import info
from ..seed import rng_state, set_rng_state
from .loaders import with_workers


@dataclass
class WorkersResult:
    """What `measure_num_workers` found: the chosen count and the samples/s measured per count."""

    num_workers: int
    throughput: dict[int, float] = field(default_factory=dict)
    batches: int = 0  # batches timed per count

    @property
    def speedup(self) -> float:
        """Throughput of the best count over that of 0 workers (1.0 when loading in-process is best)."""
        base = self.throughput.get(0)
        best = max(self.throughput.values(), default=0.0)
        return best / base if base else 1.0

    def describe(self) -> str:
        rates = ", ".join(f"{n}: {rate:,.0f}" for n, rate in sorted(self.throughput.items()))
        return (
            f"num_workers={self.num_workers} ({self.speedup:.2f}x the speed of 0 workers; samples/s {rates})"
        )


def cpu_count() -> int:
    """CPUs this process may run on (the affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def measure_num_workers(
    loader: DataLoader,
    max_workers: int | None = None,
    batches: int = 50,
    tolerance: float = 0.05,
    pin_memory: bool | None = None,
) -> WorkersResult:
    """Time `batches` batches of `loader` for each worker count from 0 to `max_workers`.

    `max_workers` defaults to the CPUs this process may use. Each count gets a fresh loader
    (the same dataset, sampler, collate_fn, `prefetch_factor`; `persistent_workers=True`;
    `pin_memory` on CUDA unless given). The clock starts once the workers are up and their
    prefetch queue has filled (worker start-up is paid once per fit with persistent workers), so
    the number is the steady rate. The choice is the smallest count within `tolerance` of the best.
    Counting stops early when two counts in a row are slower than the best by more than `tolerance`.
    """
    _check(loader, max_workers, batches, tolerance)
    top = cpu_count() if max_workers is None else max_workers
    pin = torch.cuda.is_available() if pin_memory is None else pin_memory
    result = WorkersResult(num_workers=0, batches=batches)
    worse = 0
    with _rng_kept(loader):
        for count in range(top + 1):
            trial = with_workers(loader, count, pin_memory=pin, persistent_workers=count > 0)
            result.throughput[count] = rate = _throughput(trial, batches)
            best = max(result.throughput.values())
            worse = worse + 1 if rate < (1 - tolerance) * best else 0
            if worse == 2:
                break
    best = max(result.throughput.values())
    result.num_workers = min(n for n, r in result.throughput.items() if r >= (1 - tolerance) * best)
    return result


def find_num_workers(
    loader: DataLoader,
    max_workers: int | None = None,
    batches: int = 50,
    tolerance: float = 0.05,
    verbose: bool = True,
) -> int:
    """The fewest workers that load within `tolerance` of the fastest count (see `measure_num_workers`)."""
    result = measure_num_workers(loader, max_workers, batches, tolerance)
    if verbose:
        info(f"find_num_workers: {result.describe()}")
    return result.num_workers


def _throughput(loader: DataLoader, batches: int) -> float:
    """Samples (or batches, without a batch size) per second, once the prefetch queue is full.

    Short loaders are cycled (their persistent workers stay up between passes) until `batches` are timed.
    """
    warmup = 1 + loader.num_workers * (loader.prefetch_factor or 0)
    if loader_length(loader) == 0:
        return 0.0
    it, samples, start = _cycle(loader), 0, 0.0
    try:
        for i in range(warmup + batches):
            if i == warmup:
                samples, start = 0, time.perf_counter()
            samples += _size(next(it))
        elapsed = time.perf_counter() - start
    finally:
        it.close()
    return samples / elapsed if elapsed > 0 and samples else 0.0


def _cycle(loader: DataLoader) -> Iterator[Any]:
    while True:
        yield from loader


@contextlib.contextmanager
def _rng_kept(loader: DataLoader) -> Iterator[None]:
    """The measurement draws from the global RNGs and the loader's generators; put them back."""
    generators = {
        id(g): g for g in (loader.generator, getattr(loader.sampler, "generator", None)) if g is not None
    }
    states = {key: g.get_state() for key, g in generators.items()}
    saved = rng_state()
    try:
        yield
    finally:
        set_rng_state(saved)
        for key, g in generators.items():
            g.set_state(states[key])


def _size(batch: Any) -> int:
    if isinstance(batch, torch.Tensor):
        return len(batch) if batch.dim() else 1
    if isinstance(batch, list | tuple) and batch:
        return _size(batch[0])
    if isinstance(batch, dict) and batch:
        return _size(next(iter(batch.values())))
    return 1


def _check(loader: Any, max_workers: Any, batches: Any, tolerance: Any) -> None:
    if not isinstance(loader, DataLoader):
        raise SurgeTypeError(f"loader must be a torch DataLoader, got {type(loader).__name__}")
    if max_workers is not None and (
        isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 0
    ):
        raise bad_value("max_workers", max_workers, "None (the CPU count) or an int >= 0")
    if isinstance(batches, bool) or not isinstance(batches, int) or batches < 1:
        raise bad_value("batches", batches, "an int >= 1")
    if not isinstance(tolerance, int | float) or not 0 <= tolerance < 1:
        raise bad_value("tolerance", tolerance, "a number in [0, 1)")
