"""Rank-zero helpers, from the `lightning-utilities` package Lightning itself uses.

`rank_zero_only.rank` is set here from the launcher's variables (as Lightning sets it), so a
decorated function runs on global rank zero only.
"""

from __future__ import annotations

import logging

from lightning_utilities.core import rank_zero as _messages
from lightning_utilities.core.rank_zero import (
    WarningCache,
    rank_prefixed_message,
    rank_zero_debug,
    rank_zero_deprecation,
    rank_zero_info,
    rank_zero_only,
    rank_zero_warn,
)

from ...rank_zero import global_rank, lightning_log

# As Lightning: `rank_zero_info` and `rank_zero_debug` go through the "lightning.pytorch" logger, at
# INFO to standard error unless the root logger has handlers (then they propagate there).
_messages.log = logging.getLogger("lightning.pytorch.utilities.rank_zero")
_logger = lightning_log()
_logger.setLevel(logging.INFO)  # at import, as Lightning's own import does

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
