"""Apple GPUs through torch.mps (one device)."""

from __future__ import annotations

import torch

from .base import Accelerator


class MPSAccelerator(Accelerator):
    name = "mps"

    @staticmethod
    def is_available() -> bool:
        return bool(getattr(torch.backends, "mps", None)) and torch.backends.mps.is_available()

    @staticmethod
    def device_count() -> int:
        return 1 if MPSAccelerator.is_available() else 0

    def device(self, index: int) -> torch.device:
        return torch.device("mps")
