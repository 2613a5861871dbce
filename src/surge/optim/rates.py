"""Every learning rate of a fit multiplied by one factor, schedules included: what `scale_lr`
does for a larger batch and what a rollback does after a loss spike. One function, so both keep
the same rates (a tensor rate scaled in place, OneCycleLR's range, the schedulers' bases)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from torch import Tensor
from torch.optim import Optimizer

LR_KEYS = ("lr", "initial_lr", "max_lr", "min_lr")  # OneCycleLR keeps its range in the param groups
SCHEDULER_RATES = ("base_lrs", "max_lrs", "_last_lr")  # CyclicLR keeps max_lrs; get_last_lr() reads _last_lr


def scale_rates(optimizers: Iterable[Optimizer], schedulers: Iterable[Any], factor: float) -> None:
    """Multiply every param group's rates and every scheduler's base rates by `factor`, so that a
    schedule keeps the scale from here on. A rate held as a tensor (capturable or fused optimizers)
    is scaled in place."""
    for opt in optimizers:
        for group in opt.param_groups:
            for key in LR_KEYS:
                value = group.get(key)
                if isinstance(value, Tensor):
                    value.mul_(factor)
                elif isinstance(value, int | float) and not isinstance(value, bool):
                    group[key] = value * factor
    for scheduler in schedulers:
        _scale_scheduler(scheduler, factor)


def _scale_scheduler(scheduler: Any, factor: float) -> None:
    for attr in SCHEDULER_RATES:
        values = getattr(scheduler, attr, None)
        if isinstance(values, list):
            setattr(scheduler, attr, [v * factor for v in values])
    for inner in getattr(scheduler, "_schedulers", ()):  # SequentialLR, ChainedScheduler
        _scale_scheduler(inner, factor)
