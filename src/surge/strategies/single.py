"""One process on one device: the default strategy."""

from __future__ import annotations

from .base import Strategy


class SingleDeviceStrategy(Strategy):
    """Moves the module once; everything else is the base behaviour."""

    name = "single"
