"""Tuners: the largest batch that fits, the number of loader workers, a learning-rate range test."""

from __future__ import annotations

from .batch_size import find_batch_size
from .lr_finder import LRFinderResult, lr_find
from .workers import WorkersResult, find_num_workers, measure_num_workers, plan_num_workers

__all__ = [
    "LRFinderResult",
    "WorkersResult",
    "find_batch_size",
    "find_num_workers",
    "lr_find",
    "measure_num_workers",
    "plan_num_workers",
]
