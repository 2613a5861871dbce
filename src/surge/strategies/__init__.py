"""Strategies: how processes, devices and the module are arranged."""

from .base import Strategy
from .ddp import DDPStrategy
from .single import SingleDeviceStrategy

__all__ = ["DDPStrategy", "SingleDeviceStrategy", "Strategy"]
