"""`lightning.pytorch.profilers` (and `profilers.*`): surge's `Profiler`, `SimpleProfiler`,
`AdvancedProfiler`, `PyTorchProfiler`."""

from __future__ import annotations

from ..profiler import AdvancedProfiler, Profiler, PyTorchProfiler, SimpleProfiler
from .refuse import module_getattr

__getattr__ = module_getattr(
    "lightning.pytorch.profilers",
    {
        "PassThroughProfiler": "pass profiler=None",
        "XLAProfiler": "surge has no XLA support",
    },
)

__all__ = ["AdvancedProfiler", "Profiler", "PyTorchProfiler", "SimpleProfiler"]
