"""The Accelerator interface: what kind of device runs the steps, and which of them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from ..trainer import Trainer


class Accelerator:
    """A device kind. Subclasses say whether it exists, how many there are, and how to set one up.

    Also has Lightning's public members (auto_device_count, get_parallel_devices, setup,
    teardown, get_device_stats), so `trainer.accelerator` answers scripts that use them.
    """

    name = "cpu"
    pin_memory = False  # whether DataLoaders should pin host memory for this device

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    def device(self, index: int) -> torch.device:
        return torch.device(self.name, index) if self.name != "cpu" else torch.device("cpu")

    def setup_device(self, device: torch.device) -> None:
        """Make `device` this process's current device."""

    # -- Lightning's members -----------------------------------------------------------------
    @classmethod
    def auto_device_count(cls) -> int:
        """How many devices `devices="auto"` uses."""
        return cls.device_count()

    def get_parallel_devices(self, devices: int | list[int]) -> list[torch.device]:
        """The torch devices for a count (the first N) or a list of indices."""
        indices = list(range(devices)) if isinstance(devices, int) else list(devices)
        return [self.device(i) for i in indices]

    def get_device_stats(self, device: Any) -> dict[str, Any]:
        """Memory statistics of `device` (torch's, where it keeps them; else none)."""
        return {}

    def setup(self, trainer: Trainer) -> None:
        """Called as a stage sets up; nothing to do."""

    def teardown(self) -> None:
        """Release what the device holds; nothing to do."""
