"""Precision plugins, one family per file, chosen by `precision=`."""

from __future__ import annotations

import torch

from .base import Precision
from .full import DoublePrecision, FullPrecision
from .half import HalfPrecision
from .mixed import MixedPrecision

__all__ = [
    "DoublePrecision",
    "FullPrecision",
    "HalfPrecision",
    "MixedPrecision",
    "Precision",
    "precision_plugin",
]


def precision_plugin(name: str, device_type: str) -> Precision:
    """The plugin for a normalised precision name (see `config.PRECISION_ALIASES`) on a device type."""
    if name == "32-true":
        return FullPrecision()
    if name == "64-true":
        return DoublePrecision()
    dtype = torch.float16 if name.startswith("16") else torch.bfloat16
    if name.endswith("-mixed"):
        return MixedPrecision(dtype, device_type)
    return HalfPrecision(dtype)
