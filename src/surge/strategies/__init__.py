"""Strategies: how processes, devices and the module are arranged; each file registers its name."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config.lazy_names import LazyNames
from ..config.registry import register_strategy
from .base import Layout, Strategy
from .single import SingleDeviceStrategy

if TYPE_CHECKING:
    from .ddp import DDPStrategy
    from .ddp_names import PresetDDPStrategy
    from .dp import DataParallelStrategy
    from .fsdp import FSDPStrategy
    from .model_parallel import ModelParallel

_NAMES = LazyNames(
    __name__,
    {
        "DDPStrategy": "ddp",
        "PresetDDPStrategy": "ddp_names",
        "DataParallelStrategy": "dp",
        "FSDPStrategy": "fsdp",
        "ModelParallel": "model_parallel",
    },
)
_NAMES.install(globals())
load_all = _NAMES.load_all  # the registry's: every built-in registers its names

__all__ = [
    "DataParallelStrategy",
    "DDPStrategy",
    "FSDPStrategy",
    "PresetDDPStrategy",
    "Layout",
    "ModelParallel",
    "SingleDeviceStrategy",
    "Strategy",
    "register_strategy",
]
