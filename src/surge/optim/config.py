"""What `configure_optimizers()` returned, in one normalised shape, checked against the kind of
optimization (automatic or manual) the module uses."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torch.optim import Optimizer

from ..config.semantics import SURGE, Semantics
from ..errors import MisconfigurationError, SurgeRuntimeError
from ..module.log_hooks import refusing
from ..rank_zero import global_rank


@dataclass(kw_only=True)
class SchedulerConfig:
    """A learning-rate scheduler and when to step it."""

    scheduler: Any
    interval: str = "epoch"
    frequency: int = 1
    monitor: str | None = None
    strict: bool = True
    name: str | None = None
    by_module: bool = False  # manual optimization: the module steps it (any object, no monitor)

    def __post_init__(self) -> None:
        if self.interval not in ("step", "epoch"):
            raise MisconfigurationError(
                f'lr_scheduler "interval"={self.interval!r} is not valid: use "step" or "epoch".'
            )
        if isinstance(self.frequency, bool) or not isinstance(self.frequency, int) or self.frequency < 1:
            raise MisconfigurationError(
                f'lr_scheduler "frequency"={self.frequency!r} is not valid: use an int >= 1.'
            )
        if self.by_module:
            return
        if not hasattr(self.scheduler, "step"):
            raise MisconfigurationError(
                f"The provided lr scheduler `{type(self.scheduler).__name__}` doesn't follow PyTorch's LRScheduler "
                "API: it has no step() method. Use a torch.optim.lr_scheduler scheduler, or step it yourself "
                "under manual optimization (automatic_optimization=False)."
            )
        if self.needs_metric and self.monitor is None:
            raise MisconfigurationError(
                f"{type(self.scheduler).__name__} steps on a metric: return "
                '{"optimizer": opt, "lr_scheduler": {"scheduler": sched, "monitor": "val_loss"}}.'
            )

    @property
    def needs_metric(self) -> bool:
        from torch.optim.lr_scheduler import ReduceLROnPlateau

        return isinstance(self.scheduler, ReduceLROnPlateau)


def parse_optimizers(
    returned: Any, where: str = "configure_optimizers()", manual: bool = False
) -> tuple[list[Optimizer], list[SchedulerConfig]]:
    """Optimizers and scheduler configs from any of the shapes Lightning users return. `manual`
    (automatic_optimization=False): the module steps the schedulers, so any object is one and the
    keys that only automatic stepping reads ('monitor', 'strict') are ignored with a warning, as in
    Lightning."""
    _check_not_empty(returned, where)
    optimizers, entries = _collect(returned, where)
    schedulers = [
        _stepped_by_module(entry, where) if manual else _config(entry, where, monitor)
        for entry, monitor in entries
    ]
    if not optimizers:
        raise MisconfigurationError(f"{where} returned no optimizer.")
    for opt in optimizers:
        if not isinstance(opt, Optimizer):
            raise MisconfigurationError(f"{where} returned {opt!r}, which is not a torch.optim.Optimizer.")
    return optimizers, schedulers


def configured_optimizers(
    module: Any, semantics: Semantics = SURGE
) -> tuple[list[Optimizer], list[SchedulerConfig]]:
    """What the module's `configure_optimizers()` returns, parsed for its optimization mode and checked."""
    with refusing(module, "configure_optimizers"):  # as Lightning: `self.log` refused there
        returned = module.configure_optimizers()
    optimizers, schedulers = parse_optimizers(returned, manual=not module.automatic_optimization)
    check_optimizer_count(module, optimizers, semantics)
    return optimizers, schedulers


def check_optimizer_count(module: Any, optimizers: Sequence[Optimizer], semantics: Semantics = SURGE) -> None:
    """A `training_step` asking for `optimizer_idx` (Lightning 1.x) is refused; so, in the Lightning
    mode, are several optimizers under automatic optimization, as Lightning 2 refuses them (surge's
    own API steps each of them after the one backward)."""
    try:
        asks_index = "optimizer_idx" in inspect.signature(module.training_step).parameters
    except (TypeError, ValueError):
        asks_index = False
    if asks_index:
        raise SurgeRuntimeError(
            "Training with multiple optimizers is only supported with manual optimization. Remove the "
            "`optimizer_idx` argument from `training_step`, set `self.automatic_optimization = False` and "
            "access your optimizers in `training_step` with `opt1, opt2, ... = self.optimizers()`."
        )
    refused = semantics.automatic_multiple_optimizers == "refused"
    if len(optimizers) > 1 and module.automatic_optimization and refused:
        raise SurgeRuntimeError(
            "Training with multiple optimizers is only supported with manual optimization. Set "
            "`self.automatic_optimization = False`, then access your optimizers in `training_step` with "
            "`opt1, opt2, ... = self.optimizers()`."
        )


def _check_not_empty(returned: Any, where: str) -> None:
    if returned is None:
        raise MisconfigurationError(
            f"{where} returned None; return an optimizer, e.g. torch.optim.Adam(self.parameters(), lr=1e-3)."
        )
    if isinstance(returned, str | bytes):
        raise MisconfigurationError(
            f"{where} returned the {type(returned).__name__} {returned!r}; return an optimizer object, e.g. "
            "torch.optim.Adam(self.parameters(), lr=1e-3)."
        )


def _collect(returned: Any, where: str) -> tuple[list[Any], list[tuple[Any, str | None]]]:
    """The optimizers (not yet type-checked) and scheduler entries, by the shape returned."""
    optimizers: list[Any] = []
    schedulers: list[tuple[Any, str | None]] = []  # (the entry, the dict's "monitor")
    if isinstance(returned, Optimizer):
        optimizers = [returned]
    elif isinstance(returned, Mapping):
        _from_dict(returned, optimizers, schedulers, where)
    elif _is_optimizers_and_schedulers(returned):
        optimizers = list(returned[0])
        scheds = returned[1] if isinstance(returned[1], Sequence) else [returned[1]]
        schedulers = [(s, None) for s in scheds]
    elif isinstance(returned, Sequence):
        for item in returned:
            if isinstance(item, Mapping):
                _from_dict(item, optimizers, schedulers, where)
            else:
                optimizers.append(item)
    else:
        raise MisconfigurationError(
            f"{where} returned {type(returned).__name__}; return an Optimizer, a list, or a dict."
        )
    return optimizers, schedulers


def _is_optimizers_and_schedulers(returned: Any) -> bool:
    """`([opt, ...], [sched, ...])` or `([opt, ...], sched)`."""
    return (
        isinstance(returned, Sequence)
        and len(returned) == 2
        and isinstance(returned[0], Sequence)
        and not isinstance(returned[0], Mapping)
    )


def _from_dict(d: Mapping[str, Any], optimizers: list, schedulers: list, where: str) -> None:
    unknown = set(d) - {"optimizer", "lr_scheduler", "monitor"}
    if unknown or "optimizer" not in d:
        raise MisconfigurationError(
            f"{where} returned a dict with keys {sorted(d)}; allowed: 'optimizer' (required), 'lr_scheduler', 'monitor'."
        )
    optimizers.append(d["optimizer"])
    if d.get("lr_scheduler") is not None:
        schedulers.append((d["lr_scheduler"], d.get("monitor")))


def _stepped_by_module(entry: Any, where: str) -> SchedulerConfig:
    """A scheduler entry under manual optimization: any object, and the keys only automatic
    stepping reads are dropped with Lightning's warning."""
    if not isinstance(entry, Mapping):
        return SchedulerConfig(scheduler=entry, by_module=True)
    ignored = [k for k in entry if k in ("monitor", "strict", "reduce_on_plateau")]
    if ignored and global_rank() == 0:
        warnings.warn(
            f"The lr scheduler dict contains the key(s) {ignored}, but the keys will be ignored. You need to "
            "call `lr_scheduler.step()` manually in manual optimization.",
            RuntimeWarning,
            stacklevel=2,
        )
    kept = {k: v for k, v in entry.items() if k not in ignored}
    if "scheduler" not in kept or set(kept) - _SCHEDULER_KEYS:
        _config(entry, where)  # raises the error that names the keys
    return SchedulerConfig(**kept, by_module=True)


_SCHEDULER_KEYS = {"scheduler", "interval", "frequency", "monitor", "strict", "name"}


def _config(s: Any, where: str, monitor: str | None = None) -> SchedulerConfig:
    if isinstance(s, Mapping):
        allowed = _SCHEDULER_KEYS
        if "scheduler" not in s or set(s) - allowed:
            raise MisconfigurationError(
                f"{where}: the lr_scheduler dict has keys {sorted(s)}; allowed: {sorted(allowed)} ('scheduler' required)."
            )
        kwargs = dict(s)
        kwargs.setdefault("monitor", monitor)
        return SchedulerConfig(**kwargs)
    return SchedulerConfig(scheduler=s, monitor=monitor)
