"""Strategies: how processes, devices and the module are arranged; each file registers its name."""

from ..config.registry import register_strategy
from .base import Layout, Strategy
from .ddp import DDPStrategy
from .ddp_names import PresetDDPStrategy
from .dp import DataParallelStrategy
from .fsdp import FSDPStrategy
from .model_parallel import ModelParallel
from .single import SingleDeviceStrategy

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
