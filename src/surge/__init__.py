"""surge: write the model once as a `surge.Module`; `surge.Trainer` trains it fast and right."""

from __future__ import annotations

from . import _moved, callbacks, loggers, profiler, rank_zero, strategies
from .checkpoint.export import export_safetensors
from .datamodule import DataModule
from .errors import CheckpointError, MisconfigurationError, SurgeError, SurgeRuntimeError, SurgeTypeError
from .module import Module
from .seed import seed_everything
from .trainer import Trainer
from .version import __version__

_moved.install()  # surge.sharded, surge.cache, ...: the paths the docs gave before

__all__ = [
    "CheckpointError",
    "DataModule",
    "MisconfigurationError",
    "Module",
    "SurgeError",
    "SurgeRuntimeError",
    "SurgeTypeError",
    "Trainer",
    "__version__",
    "callbacks",
    "export_safetensors",
    "loggers",
    "profiler",
    "rank_zero",
    "seed_everything",
    "strategies",
]
