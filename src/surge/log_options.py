"""`self.log`'s options that need a decision before a value is recorded: `reduce_fx` in any form
Lightning takes, and the options surge refuses (by name, never ignored)."""

from __future__ import annotations

from typing import Any

import torch

from .errors import MisconfigurationError

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
