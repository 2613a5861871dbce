"""Full precision: "32-true" (the module as it is) and "64-true" (the module cast to float64,
tensors created in the steps float64)."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from ..config.registry import register_precision
from ..data import cast_floating
from .base import M, Precision, default_dtype


@register_precision("32-true", aliases=("32",))
class FullPrecision(Precision):
    """fp32 as the module defines it; nothing to do per step."""

    name = "32-true"
    fp32_matmuls = True


@register_precision("64-true", aliases=("64",))
class DoublePrecision(Precision):
    """float64 parameters and inputs: for numerics checks, not for speed."""

    name = "64-true"
    param_dtype = torch.float64

    def convert_module(self, module: M) -> M:
        return (
            module.double()
        )  # floating tensors only: `.to(float64)` would drop a complex buffer's imaginary part

    def forward_context(self) -> contextlib.AbstractContextManager:
        return default_dtype(torch.float64)  # as "-true" half: tensors made in a step are float64

    def convert_input(self, batch: Any) -> Any:
        return cast_floating(batch, torch.float64)

    @property
    def converts_input(self) -> bool:
        return True
