"""A rank's epoch metrics so far, restored from a checkpoint written inside an epoch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..rank_zero import warn


def own_results(
    state: Mapping[str, Any], strategy: Any, batches_done: int, epoch: int
) -> dict[str, Any] | None:
    """This rank's saved epoch metrics, or None: at an epoch's start, or when the world size changed
    (the rest of the epoch is sharded differently, so its metrics start from the resume; said once)."""
    saved, world = state.get("results"), strategy.world_size
    if batches_done and state.get("world_size", world) != world:
        warn(
            f"resuming inside epoch {epoch} on {world} processes from a checkpoint of "
            f"{state['world_size']}: the rest of this epoch is sharded differently (samples may be "
            "seen twice or missed until it ends), and its epoch metrics start from the resume"
        )
        return None
    return saved[strategy.global_rank] if isinstance(saved, list) and len(saved) == world else None
