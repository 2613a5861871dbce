"""NVIDIA GPUs through torch.cuda; indices are logical (after CUDA_VISIBLE_DEVICES)."""

from __future__ import annotations

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
