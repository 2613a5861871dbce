"""Rank-zero helpers, from the `lightning-utilities` package Lightning itself uses.

`rank_zero_only.rank` is set here from the launcher's variables (as Lightning sets it), so a
decorated function runs on global rank zero only.
"""

from __future__ import annotations

from lightning_utilities.core.rank_zero import (
    WarningCache,
    rank_prefixed_message,
    rank_zero_debug,
    rank_zero_deprecation,
    rank_zero_info,
    rank_zero_only,
    rank_zero_warn,
)

from ...rank_zero import global_rank

if getattr(rank_zero_only, "rank", None) is None:  # as Lightning: set once, from the environment
    rank_zero_only.rank = global_rank()  # type: ignore[attr-defined]

__all__ = [
    "WarningCache",
    "rank_prefixed_message",
    "rank_zero_debug",
    "rank_zero_deprecation",
    "rank_zero_info",
    "rank_zero_only",
    "rank_zero_warn",
]
