"""Strategies: how processes, devices and the module are arranged."""

from .base import Strategy
from .ddp import DDPStrategy
from .dp import DataParallelStrategy
from .fsdp import FSDPStrategy
from .single import SingleDeviceStrategy

__all__ = ["DataParallelStrategy", "DDPStrategy", "FSDPStrategy", "SingleDeviceStrategy", "Strategy"]
