"""surge: write the model once as a `surge.Module`; `surge.Trainer` trains it fast and right.

The names below are imported when first used (`surge.Trainer` imports torch, `import surge` alone
does not), so the `surge` command answers `--help` and checks a config before torch is loaded.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING

from . import _moved
from .errors import CheckpointError, MisconfigurationError, SurgeError, SurgeRuntimeError, SurgeTypeError
from .version import __version__

if TYPE_CHECKING:
    from . import callbacks, loggers, profiler, rank_zero, strategies
    from .checkpoint.export import export_safetensors
    from .datamodule import DataModule
    from .module import Module
    from .seed import seed_everything
    from .trainer import Trainer

_moved.install()  # surge.sharded, surge.cache, ...: the paths the docs gave before

_LAZY = {  # public name -> the module that defines it (a module itself where the name is one)
    "DataModule": "surge.datamodule",
    "Module": "surge.module",
    "Trainer": "surge.trainer",
    "export_safetensors": "surge.checkpoint.export",
    "seed_everything": "surge.seed",
    "callbacks": "surge.callbacks",
    "loggers": "surge.loggers",
    "profiler": "surge.profiler",
    "rank_zero": "surge.rank_zero",
    "strategies": "surge.strategies",
}


def __getattr__(name: str) -> object:
    where = _LAZY.get(name)
    if where is None and not name.startswith("__") and importlib.util.find_spec(f"surge.{name}"):
        where = f"surge.{name}"  # any subpackage, as `import surge; surge.tune` found it when all was loaded
    if where is None:
        raise AttributeError(f"module 'surge' has no attribute {name!r}")
    module = importlib.import_module(where)
    value = module if where == f"surge.{name}" else getattr(module, name)
    globals()[name] = value  # once: later reads are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


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
