"""Metrics of a pipeline, reported once from its last stage.

Only the last stage computes losses, so only its ranks log values. At each read point (log
intervals, epoch ends; never per step) every rank reads its own results, reduced over its stage's
data-parallel group, and then takes the last stage's: the names, their options and the values are
broadcast from the last stage's first rank, so the loggers (rank zero, on the first stage), the
callbacks and the progress bar see the same numbers everywhere, and no rank reports a value of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from .mesh import GroupReducer

Options = dict[str, tuple[Any, ...]]


class PipelineReducer(GroupReducer):
    """Reduction over this stage's data-parallel group, and the last stage's reads shared."""

    def __init__(self, group: Callable[[], Any], source: Callable[[], int]) -> None:
        super().__init__(group)
        self._source = source  # the global rank of the last stage's first rank

    def share_read(self, values: dict[str, float], options: Options) -> tuple[dict[str, float], Options]:
        """The last stage's `values` and its slots' `options`, on every rank (one broadcast)."""
        box: list[Any] = [(values, options)]
        dist.broadcast_object_list(box, src=self._source())
        return box[0]
