"""Speed options applied once at set-up: channels_last, cudnn.benchmark, matmul precision."""

from __future__ import annotations

from typing import Any

import torch

from ..rank_zero import info

_hinted = False


def apply_backend_flags(benchmark: bool | None, matmul_precision: str | None) -> None:
    """cudnn autotuning and the float32 matmul precision (TF32 on tensor cores for "high")."""
    if benchmark is not None:
        torch.backends.cudnn.benchmark = benchmark
    if matmul_precision is not None:
        torch.set_float32_matmul_precision(matmul_precision)


def tensor_core_hint(device: torch.device, precision: Any) -> None:
    """Say once when fp32 runs on a GPU with tensor cores that bf16 or TF32 would be faster."""
    global _hinted
    if _hinted or device.type != "cuda" or not precision.fp32_matmuls:
        return
    if torch.cuda.get_device_capability(device)[0] >= 8 and torch.get_float32_matmul_precision() == "highest":
        _hinted = True
        info(
            f"{torch.cuda.get_device_name(device)} has tensor cores, and this run uses full fp32 matmuls: "
            "precision='bf16-mixed' (or matmul_precision='high' for TF32) is usually several times faster."
        )


def to_channels_last(batch_tensor: torch.Tensor) -> torch.Tensor:
    """4-D image batches in channels_last memory format; other tensors unchanged."""
    if batch_tensor.ndim == 4:
        return batch_tensor.contiguous(memory_format=torch.channels_last)
    return batch_tensor
