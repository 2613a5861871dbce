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
_CLASS_NAMES = {  # profiler= name -> the class's name here
    "simple": "SimpleProfiler",
    "advanced": "AdvancedProfiler",
    "pytorch": "PyTorchProfiler",
}

if TYPE_CHECKING:
    PROFILERS: dict[str, type[Profiler]]  # profiler= name -> class
else:  # (a type checker reads the imports above: a misspelt name stays an error)

    def __getattr__(name: str) -> Any:
        """`PROFILERS` (name -> class, every profiler imported when it is first read), or a lazy name."""
        if name == "PROFILERS":
            value = {key: _NAMES.attribute(cls) for key, cls in _CLASS_NAMES.items()}
            globals()[name] = value
            return value
        return _NAMES.attribute(name)

    __dir__ = _NAMES.listing

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
    return _NAMES.attribute(_CLASS_NAMES[value])()
