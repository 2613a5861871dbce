"""`self.log`'s arguments that need a decision before a value is recorded: the value's kind, the
name, `reduce_fx` in any form Lightning takes, and the options surge refuses (by name, never ignored)."""

from __future__ import annotations

import numbers
import sys
from typing import Any

import torch

from ..errors import MisconfigurationError

REDUCTIONS = {
    torch.mean: "mean",
    torch.max: "max",
    torch.min: "min",
    torch.sum: "sum",
    max: "max",
    min: "min",
    sum: "sum",
}
NAMES = {"mean": "mean", "avg": "mean", "max": "max", "min": "min", "sum": "sum"}


def reduction(name: str, reduce_fx: Any) -> str:
    """The reduction's name for `reduce_fx`: a string ("mean" or "avg", "max", "min", "sum", any case)
    or one of `torch.mean`, `torch.max`, `torch.min`, `torch.sum` (or python's `max`, `min`, `sum`),
    as Lightning takes it."""
    if isinstance(reduce_fx, str) and reduce_fx.lower() in NAMES:
        return NAMES[reduce_fx.lower()]
    if callable(reduce_fx) and reduce_fx in REDUCTIONS:
        return REDUCTIONS[reduce_fx]
    raise MisconfigurationError(
        f"self.log({name!r}, reduce_fx={reduce_fx!r}) is not supported: use 'mean' (or 'avg'), 'max', 'min', "
        "'sum', or torch.mean, torch.max, torch.min, torch.sum (or python's max, min, sum)."
    )


def refuse_log_options(name: str, rank_zero_only: bool, sync_dist_group: Any, enable_graph: bool) -> None:
    """Lightning's `self.log` options surge does not honour: refused by name, never ignored."""
    if rank_zero_only:
        raise MisconfigurationError(
            f"self.log({name!r}, rank_zero_only=True) is not supported: log from every process (surge "
            "reduces epoch values exactly across them), or write rank zero's value with trainer.log_metrics."
        )
    if sync_dist_group is not None:
        raise MisconfigurationError(
            f"self.log({name!r}, sync_dist_group=...) is not supported: values are reduced over all processes."
        )
    if enable_graph:
        raise MisconfigurationError(
            f"self.log({name!r}, enable_graph=True) is not supported: logged values are kept detached, so "
            "no autograd graph is held between steps."
        )


def check_log_value(name: str, value: Any) -> None:
    """A number, a one-element tensor or a torchmetrics Metric, as Lightning allows; anything else
    (None, a string, a list, a dict) raises Lightning's ValueError (a MisconfigurationError)."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise MisconfigurationError(
                f"`self.log({name}, {value})` was called, but the tensor must have a single element. "
                f"You can try doing `self.log({name}, {value}.mean())`"
            )
        return
    if isinstance(value, numbers.Number) or _is_metric(value):
        return
    if isinstance(value, dict) and any(isinstance(v, dict) for v in value.values()):
        raise MisconfigurationError(
            f"`self.log({name}, {value})` was called, but nested dictionaries cannot be logged"
        )
    raise MisconfigurationError(
        f"`self.log({name}, {value})` was called, but `{type(value).__name__}` values cannot be logged"
    )


def check_log_name(name: str, add_dataloader_idx: bool) -> None:
    """With `add_dataloader_idx=True` the suffix is surge's to add: a name holding it is refused."""
    if add_dataloader_idx and isinstance(name, str) and "/dataloader_idx_" in name:
        raise MisconfigurationError(
            f"You called `self.log` with the key `{name}` but it should not contain information about "
            "`dataloader_idx` when `add_dataloader_idx=True`"
        )


def _is_metric(value: Any) -> bool:
    """Whether `value` is a torchmetrics Metric (no import: if torchmetrics is not loaded, it is not one)."""
    tm = sys.modules.get("torchmetrics")
    return tm is not None and isinstance(value, tm.Metric)
