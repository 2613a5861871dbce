"""One process on one device: the default strategy."""

from __future__ import annotations

from ..config.registry import register_strategy
from ..errors import MisconfigurationError
from .base import Layout, Strategy


@register_strategy("single")
class SingleDeviceStrategy(Strategy):
    """Moves the module once; everything else is the base behaviour."""

    name = "single"

    @classmethod
    def from_layout(cls, layout: Layout) -> Strategy:
        if layout.processes > 1:
            raise MisconfigurationError(
                f"strategy='single' runs one process, but devices={layout.requested_devices!r}, "
                f"num_nodes={layout.num_nodes} ask for {layout.processes}; use strategy='ddp'."
            )
        return super().from_layout(layout)
