"""Strategies: how processes, devices and the module are arranged."""

from .base import Strategy
from .single import SingleDeviceStrategy

__all__ = ["SingleDeviceStrategy", "Strategy"]
