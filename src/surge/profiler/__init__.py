"""Profilers for `Trainer(profiler=...)`: "simple", "advanced", "pytorch", or an instance."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..config.lazy_names import LazyNames
from .base import LoopParts, Profiler

if TYPE_CHECKING:
    from .advanced import AdvancedProfiler
    from .pytorch import PyTorchProfiler
    from .simple import SimpleProfiler

_NAMES = LazyNames(
    __name__,
    {"AdvancedProfiler": "advanced", "PyTorchProfiler": "pytorch", "SimpleProfiler": "simple"},
)
__getattr__ = _NAMES.attribute
__dir__ = _NAMES.listing

PROFILERS = {  # profiler= name -> the class's name here
    "simple": "SimpleProfiler",
    "advanced": "AdvancedProfiler",
    "pytorch": "PyTorchProfiler",
}

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
    """The profiler for `profiler=` (validated in the config): its class imported only when named."""
    if value is None or isinstance(value, Profiler):
        return value
    return _NAMES.attribute(PROFILERS[value])()
