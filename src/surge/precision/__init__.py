"""Precision plugins, one family per file, chosen by `precision=`; each file registers its names."""

from __future__ import annotations

from typing import cast

from ..config.registry import PRECISIONS, register_precision
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
    "register_precision",
]


def precision_plugin(precision: str | Precision, device_type: str) -> Precision:
    """The plugin for a registered precision name on a device type; a plugin object as it is."""
    if isinstance(precision, Precision):
        return precision
    cls = cast("type[Precision]", PRECISIONS.get(precision))  # registered by register_precision
    return cls.from_name(precision, device_type)
