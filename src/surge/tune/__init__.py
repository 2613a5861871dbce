"""Tuners: the largest batch that fits, the number of loader workers, a learning-rate range test."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config.lazy_names import LazyNames

if TYPE_CHECKING:
    from .batch_size import find_batch_size
    from .lr_finder import LRFinderResult, lr_find
    from .workers import WorkersResult, find_num_workers, measure_num_workers, plan_num_workers

_NAMES = LazyNames(
    __name__,
    {
        "find_batch_size": "batch_size",
        "LRFinderResult": "lr_finder",
        "lr_find": "lr_finder",
        "WorkersResult": "workers",
        "find_num_workers": "workers",
        "measure_num_workers": "workers",
        "plan_num_workers": "workers",
    },
)
_NAMES.install(globals())

__all__ = [
    "LRFinderResult",
    "WorkersResult",
    "find_batch_size",
    "find_num_workers",
    "lr_find",
    "measure_num_workers",
    "plan_num_workers",
]
