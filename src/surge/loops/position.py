"""Where the fit loop stands inside an epoch, and what its next epoch's start takes into account."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RUNNING, BATCH_END, DONE, CLOSED = range(4)  # where the epoch stands (`FitLoop.stage`)


@dataclass(frozen=True)
class EpochStart:
    """What the next epoch's start takes into account, once: a resume inside it (the RNG at its
    start, its metrics so far, its window's restored gradients) and results already emptied."""

    rng: dict[str, Any] | None = None
    results: dict[str, Any] | None = None
    keep_grads: bool = False
    fresh: bool = False  # the results were emptied when fit began (see bind)
