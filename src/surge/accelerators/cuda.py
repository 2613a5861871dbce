"""NVIDIA GPUs through torch.cuda; indices are logical (after CUDA_VISIBLE_DEVICES)."""

from __future__ import annotations

from typing import Any

import torch

from .base import Accelerator


class CUDAAccelerator(Accelerator):
    name = "cuda"
    pin_memory = True

    @staticmethod
    def is_available() -> bool:
        return torch.cuda.is_available()

    @staticmethod
    def device_count() -> int:
        return torch.cuda.device_count()

    def setup_device(self, device: torch.device) -> None:
        torch.cuda.set_device(device)

    def get_device_stats(self, device: Any) -> dict[str, Any]:
        """torch's CUDA memory statistics for `device` (`torch.cuda.memory_stats`)."""
        return torch.cuda.memory_stats(device)

    def teardown(self) -> None:
        torch.cuda.empty_cache()
