"""True half precision: "16-true" and "bf16-true" cast the module and float inputs to 16 bits.

Half the memory of mixed precision for weights and optimizer state, at the cost of fp32 master
weights (small updates can round away). Tensors created inside the steps default to the dtype.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from ..config.registry import register_precision
from ..data import cast_floating
from .base import M, Precision, default_dtype


@register_precision("bf16-true")
@register_precision("16-true")
class HalfPrecision(Precision):
    """Parameters, buffers and floating-point inputs in `dtype`."""

    param_dtype: torch.dtype

    def __init__(self, dtype: torch.dtype) -> None:
        self.param_dtype = dtype
        self.name = "16-true" if dtype == torch.float16 else "bf16-true"

    @classmethod
    def from_name(cls, name: str, device_type: str) -> HalfPrecision:
        return cls(torch.float16 if name == "16-true" else torch.bfloat16)

    def convert_module(self, module: M) -> M:
        return module.to(self.param_dtype)

    def convert_input(self, batch: Any) -> Any:
        return cast_floating(batch, self.param_dtype)

    @property
    def converts_input(self) -> bool:
        return True

    def forward_context(self) -> contextlib.AbstractContextManager:
        return default_dtype(self.param_dtype)
