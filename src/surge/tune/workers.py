"""How many DataLoader workers: measure the loader's throughput at 0 workers and a few worker
counts, take the fewest near the best; `plan_num_workers` bounds that measurement by the fit it serves."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import DataLoader

from ..data import loader_length
from ..data.loader_state import generator_states, set_generator_states
from ..errors import SurgeTypeError, bad_value
from ..launch.host import cpu_count
from ..rank_zero import info
from ..seed import rng_untouched
from .loaders import with_workers

STARTUP_S = 0.05  # a guess at starting a worker count's processes, until one start-up is measured


@dataclass
class WorkersResult:
    """What the finder found: the chosen count and the samples/s measured per count.

    From `plan_num_workers` also the fit's estimated loading time, what the measurement cost,
    and `kept`: why nothing was measured and the loader keeps its own setting ("" when measured).
    """

    num_workers: int
    throughput: dict[int, float] = field(default_factory=dict)
    batches: int = 0  # batches timed per count, at most
    expected_s: float | None = None  # the fit's loading time at 0 workers, estimated
    spent_s: float = 0.0
    kept: str = ""

    @property
    def speedup(self) -> float:
        """Throughput of the best count over that of 0 workers (1.0 when loading in-process is best)."""
        base = self.throughput.get(0)
        best = max(self.throughput.values(), default=0.0)
        return best / base if base else 1.0

    def describe(self) -> str:
        if self.kept:
            return f"num_workers={self.num_workers} kept: {self.kept}"
        rates = ", ".join(f"{n}: {rate:,.0f}" for n, rate in sorted(self.throughput.items()))
        text = (
            f"num_workers={self.num_workers} ({self.speedup:.2f}x the speed of 0 workers; samples/s {rates})"
        )
        if self.expected_s is not None and math.isfinite(self.expected_s):
            text += f"; measured in {self.spent_s:.2f} s for a fit loading ~{self.expected_s:.1f} s of data"
        return text


def measure_num_workers(
    loader: DataLoader,
    max_workers: int | None = None,
    batches: int = 50,
    tolerance: float = 0.05,
    pin_memory: bool | None = None,
    budget_s: float | None = None,
) -> WorkersResult:
    """Time up to `batches` batches of `loader` at 0 workers, then at `max_workers`, half that, ... 1.

    `max_workers` defaults to the CPUs this process may use. Each count gets a fresh loader
    (the same dataset, sampler and collate_fn; `persistent_workers=True`, `prefetch_factor=1`;
    `pin_memory` on CUDA unless given). The clock starts once every worker has delivered its
    first batch (worker start-up is paid once per fit with persistent workers), so the number is
    the steady rate. Counting stops at the first count slower than the best by more than
    `tolerance` (fewer workers are slower still); the choice is the fewest within `tolerance` of the best.
    `budget_s` bounds the whole measurement (fewer batches, fewer counts); counts it left untimed are
    absent from `throughput`.
    """
    _check(loader, max_workers, batches, tolerance)
    result = WorkersResult(num_workers=0, batches=batches)
    start = time.perf_counter()
    deadline = math.inf if budget_s is None else start + budget_s
    with _rng_kept(loader):
        pin = torch.cuda.is_available() if pin_memory is None else pin_memory
        base = with_workers(loader, 0, pin_memory=pin)
        result.throughput[0], per_batch = _throughput(base, batches, start + (deadline - start) / 3)
        _measure(loader, _counts(_top(max_workers)), result, tolerance, pin, deadline, per_batch)
    result.spent_s = time.perf_counter() - start
    return result


def plan_num_workers(
    loader: DataLoader,
    fit_batches: int | float,
    max_workers: int | None = None,
    budget: float = 0.05,
    batches: int = 50,
    tolerance: float = 0.05,
    pin_memory: bool | None = None,
) -> WorkersResult:
    """`measure_num_workers` for a fit that will load `fit_batches` batches, costing at most
    about `budget` of the time those batches take to load in the main process.

    A few batches at 0 workers give the time per batch, and so the fit's loading time (a lower
    bound of the fit's time; no worker count can save more than it). The worker counts are
    timed within `budget` of that; when not even one count fits, nothing more is measured and
    the result keeps the loader's own `num_workers`, with `kept` saying why.
    """
    _check(loader, max_workers, batches, tolerance)
    _check_plan(fit_batches, budget)
    own = loader.num_workers
    if fit_batches * budget < 1:
        return WorkersResult(own, kept=f"the fit loads only {fit_batches} batches, too few to measure")
    start = time.perf_counter()
    result = WorkersResult(num_workers=own, batches=batches)
    with _rng_kept(loader):
        pin = torch.cuda.is_available() if pin_memory is None else pin_memory
        probe = max(1, min(batches, int(min(5, fit_batches * budget / 4))))  # <= a quarter of the budget
        result.throughput[0], per_batch = _throughput(with_workers(loader, 0, pin_memory=pin), probe)
        result.expected_s = per_batch * fit_batches
        deadline = start + budget * result.expected_s
        _measure(loader, _counts(_top(max_workers)), result, tolerance, pin, deadline, per_batch)
    if len(result.throughput) == 1:  # not even one worker count fitted the budget
        need = STARTUP_S + 2 * per_batch  # start-up, the first round, one timed round
        result.num_workers = own
        result.kept = (
            "max_workers=0 leaves no count to try"
            if _top(max_workers) == 0
            else _too_short(fit_batches, per_batch, result.expected_s, need, budget, own)
        )
    result.spent_s = time.perf_counter() - start
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


def _measure(
    loader: DataLoader,
    counts: list[int],
    result: WorkersResult,
    tolerance: float,
    pin: bool,
    deadline: float,
    per_batch: float = 0.0,
) -> None:
    """Time `counts` in turn into `result.throughput` until one is clearly slower or time runs out."""
    startup = STARTUP_S
    for i, count in enumerate(counts):
        left = deadline - time.perf_counter()
        if left < startup + 2 * per_batch:
            break
        began = time.perf_counter()
        trial = with_workers(loader, count, pin_memory=pin, persistent_workers=True, prefetch_factor=1)
        share = began + max(left / (len(counts) - i), startup + 2 * per_batch)
        rate, first = _throughput(trial, result.batches, min(deadline, share))
        del trial  # shuts its workers down before the next count starts its own
        startup = max(first - per_batch, 0.0)
        if rate == 0.0:
            break
        result.throughput[count] = rate
        if rate < (1 - tolerance) * max(result.throughput.values()):
            break
    best = max(result.throughput.values())
    result.num_workers = min(n for n, r in result.throughput.items() if r >= (1 - tolerance) * best)


def _throughput(loader: DataLoader, batches: int, deadline: float = math.inf) -> tuple[float, float]:
    """Samples (or batches, without a batch size) per second once every worker has delivered a
    batch, and the seconds that first round took (start-up included); 0 workers: the seconds per batch.

    Whole rounds (one batch per worker) are timed, up to `batches` or until `deadline` has passed.
    With `prefetch_factor=1` a worker gets its next batch only once its last was taken, so batches
    made while this process was not running cannot pile up and inflate the rate.
    Short loaders are cycled (their persistent workers stay up between passes).
    """
    if loader_length(loader) == 0:
        return 0.0, 0.0
    rounds = max(1, loader.num_workers)
    target = math.ceil(batches / rounds) * rounds
    it, samples, timed = _cycle(loader), 0, 0
    try:
        begin = time.perf_counter()
        for _ in range(loader.num_workers):
            next(it)
        start = time.perf_counter()
        while timed < target:
            samples += _size(next(it))
            timed += 1
            if timed % rounds == 0 and time.perf_counter() >= deadline:
                break
        elapsed = time.perf_counter() - start
    finally:
        it.close()
    rate = samples / elapsed if elapsed > 0 and samples else 0.0
    return rate, (start - begin if loader.num_workers else elapsed / max(timed, 1))


def _too_short(
    batches: float, per_batch: float, expected: float, need: float, budget: float, own: int
) -> str:
    return (
        f"the fit loads about {batches:,.0f} batches at {per_batch * 1e3:.1f} ms each in the main process "
        f"(~{expected:.2f} s); measuring worker counts takes at least ~{need:.2f} s, more than {budget:.0%} "
        f"of that, so the loader keeps num_workers={own}"
    )


def _top(max_workers: int | None) -> int:
    return cpu_count() if max_workers is None else max_workers


def _counts(top: int) -> list[int]:
    """top, top/2, top/4, ..., 1: the most workers first, so a slower count ends the search."""
    counts = []
    while top >= 1:
        counts.append(top)
        top //= 2
    return counts


def _cycle(loader: DataLoader) -> Generator[Any, None, None]:
    while True:
        yield from loader


@contextlib.contextmanager
def _rng_kept(loader: DataLoader) -> Iterator[None]:
    """The measurement draws from the global RNGs and the loader's generators; put them back."""
    generators = generator_states(loader)
    with rng_untouched():
        try:
            yield
        finally:
            set_generator_states(loader, generators)


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


def _check_plan(fit_batches: Any, budget: Any) -> None:
    if isinstance(fit_batches, bool) or not isinstance(fit_batches, int | float) or not fit_batches >= 0:
        raise bad_value("fit_batches", fit_batches, "an int >= 0 or math.inf")
    if isinstance(budget, bool) or not isinstance(budget, int | float) or not 0 < budget <= 1:
        raise bad_value("budget", budget, "a fraction in (0, 1]")
