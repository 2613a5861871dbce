"""The Accelerator interface: what kind of device runs the steps, and which of them."""

from __future__ import annotations

import torch


class Accelerator:
    """A device kind. Subclasses say whether it exists, how many there are, and how to set one up."""

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
