"""Precision plugins, one family per file, chosen by `precision=`."""

from __future__ import annotations

from .base import Precision
from .full import DoublePrecision, FullPrecision

__all__ = ["DoublePrecision", "FullPrecision", "Precision", "precision_plugin"]


def precision_plugin(name: str, device_type: str) -> Precision:
    """The plugin for a normalised precision name on a device type."""
    if name == "32-true":
        return FullPrecision()
    if name == "64-true":
        return DoublePrecision()
    from ..errors import MisconfigurationError

    raise MisconfigurationError(f"precision={name!r} is not available yet; use '32-true' or '64-true'.")
