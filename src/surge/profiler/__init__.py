"""Profilers for `Trainer(profiler=...)`: "simple", "advanced", "pytorch", or an instance."""

from __future__ import annotations

from typing import Any

from .advanced import AdvancedProfiler
from .base import LoopParts, Profiler
from .pytorch import PyTorchProfiler
from .simple import SimpleProfiler

PROFILERS = {"simple": SimpleProfiler, "advanced": AdvancedProfiler, "pytorch": PyTorchProfiler}

__all__ = [
    "PROFILERS",
    "AdvancedProfiler",
    "LoopParts",
    "Profiler",
    "PyTorchProfiler",
    "SimpleProfiler",
    "build_profiler",
]


def build_profiler(value: Any) -> Profiler | None:
    """The profiler for `profiler=` (validated in the config)."""
    if value is None or isinstance(value, Profiler):
        return value
    return PROFILERS[value]()
