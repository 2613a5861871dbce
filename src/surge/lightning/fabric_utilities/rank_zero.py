"""`lightning.fabric.utilities.rank_zero`: the rank-zero helpers (the same objects as
`lightning.pytorch.utilities.rank_zero`'s) and `LightningDeprecationWarning`."""

from __future__ import annotations

from ..utilities.rank_zero import (
    WarningCache,
    rank_prefixed_message,
    rank_zero_debug,
    rank_zero_deprecation,
    rank_zero_info,
    rank_zero_only,
    rank_zero_warn,
)


class LightningDeprecationWarning(DeprecationWarning):
    """The category of Lightning's deprecation warnings."""


__all__ = [
    "LightningDeprecationWarning",
    "WarningCache",
    "rank_prefixed_message",
    "rank_zero_debug",
    "rank_zero_deprecation",
    "rank_zero_info",
    "rank_zero_only",
    "rank_zero_warn",
]
