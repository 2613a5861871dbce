"""The batch-size search of Lightning's `BatchSizeFinder` and `Tuner.scale_batch_size`, step by step
as Lightning takes it (the sizes tried, when it stops, the messages), over surge's trials.

`"power"` doubles from the start while trials fit, up to `max_trials` trials; `"binsearch"` doubles
until a miss, then bisects between the last fit and the miss, and takes `margin` off the result.
Either stops once the size reaches the dataset's length or `max_val`. A miss in `"power"` halves
the size (and ends the search if a trial fitted before)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..rank_zero import info


@dataclass(frozen=True)
class SearchLimits:
    """What bounds the search: `max_trials`, `max_val`, and the dataset's length (None: unknown)."""

    max_trials: int
    max_val: int
    length: int | None


def first_size(init_val: int, current: int | None, limits: SearchLimits) -> int:
    """The first size tried: `init_val` (at most `max_val`), unless the size in use already
    covers the dataset."""
    if _covers(current, limits):
        return current  # type: ignore[return-value] # _covers checked it is an int
    return min(init_val, limits.max_val)


def search_batch_size(
    fits: Callable[[int], bool], start: int, mode: str, limits: SearchLimits, margin: float
) -> int:
    """The size the search settles on, starting from `start` (see the module docstring)."""
    size = _power(fits, start, limits) if mode == "power" else _binsearch(fits, start, limits)
    if mode == "binsearch" and margin > 0:
        reduced = max(1, int(size * (1 - margin)))
        if reduced != size:
            info(f"Applying margin of {margin:.1%}, reducing batch size from {size} to {reduced}")
            size = reduced
    return size


def _covers(size: int | None, limits: SearchLimits) -> bool:
    if size is None or limits.length is None or size < limits.length:
        return False
    info(f"The batch size {size} is greater or equal than the length of your dataset: {limits.length}.")
    return True


def _next(size: int, target: int, limits: SearchLimits, outcome: str) -> int:
    """The size after `size` (`outcome`: "succeeded"/"failed"); `size` again when the search stops."""
    if outcome == "succeeded" and _covers(size, limits):
        return size
    if target > limits.max_val:
        info(f"Batch size {target} exceeds max_val limit {limits.max_val}, capping at {limits.max_val}")
        target = limits.max_val
    info(f"Batch size {size} {outcome}, trying batch size {target}")
    return target


def _at_max(size: int, limits: SearchLimits) -> bool:
    if size < limits.max_val:
        return False
    info(f"Reached the maximum batch size limit of {limits.max_val}. Stopping search.")
    return True


def _power(fits: Callable[[int], bool], size: int, limits: SearchLimits) -> int:
    fitted = False
    for trial in range(limits.max_trials):
        if _at_max(size, limits):
            break
        if fits(size):
            if trial + 1 >= limits.max_trials:
                break
            bigger = _next(size, size * 2, limits, "succeeded")
            if bigger == size:
                break
            size, fitted = bigger, True
        else:
            size = _next(size, size // 2, limits, "failed")
            if fitted:
                break
    return size


def _binsearch(fits: Callable[[int], bool], size: int, limits: SearchLimits) -> int:
    low, high, trials = 1, None, 0
    while not _at_max(size, limits):
        if fits(size):
            trials += 1
            if trials >= limits.max_trials:
                break
            low = size
            if high is not None and high - low <= 1:
                break
            target = (high + low) // 2 if high is not None else size * 2
            bigger = _next(size, target, limits, "succeeded")
            if bigger == size:
                break
            size = bigger
        else:
            high = size
            size = _next(size, (high + low) // 2, limits, "failed")
            if high - low <= 1:
                break
    return size
