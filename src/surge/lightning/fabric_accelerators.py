"""`lightning.fabric.accelerators.cuda`'s device helpers (surge has no Fabric; these need none):
`num_cuda_devices`, `is_cuda_available`, `find_usable_cuda_devices`. Its accelerator class is refused."""

from __future__ import annotations

import torch

from .accelerators import find_usable_cuda_devices


def num_cuda_devices() -> int:
    """How many CUDA devices this process can see (0 without CUDA)."""
    return torch.cuda.device_count()


def is_cuda_available() -> bool:
    """Whether a CUDA device is visible."""
    return num_cuda_devices() > 0


__all__ = ["find_usable_cuda_devices", "is_cuda_available", "num_cuda_devices"]
