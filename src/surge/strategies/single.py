"""One process on one device: the default strategy."""

from __future__ import annotations

from ..config.registry import register_strategy
from ..errors import MisconfigurationError
from .base import Layout, Strategy


@register_strategy("single", aliases=("single_device",))
class SingleDeviceStrategy(Strategy):
    """Moves the module once; everything else is the base behaviour."""

    name = "single"

    def check_layout(self, layout: Layout) -> None:
        if layout.processes > 1:
            raise MisconfigurationError(
                f"strategy='single' runs one process, but devices={layout.requested_devices!r}, "
                f"num_nodes={layout.num_nodes} ask for {layout.processes}; use strategy='ddp'."
            )
