"""What the fit loop asks of whoever runs it, as typed objects rather than the Trainer itself.

`StopRequest` is Lightning's `trainer.should_stop` (callbacks set it through the Trainer's property;
the loop reads it and makes the ranks agree); `SanityFlag` is `trainer.sanity_checking`;
`Checkpointing` is what a preemption needs to write its checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..strategies import Strategy


class StopRequest:
    """Whether the fit should stop (at the next point it can: after the minimums are met)."""

    def __init__(self) -> None:
        self.requested = False

    def set(self, value: bool) -> None:
        self.requested = bool(value)

    def agree(self, strategy: Strategy) -> None:
        """Every rank stops at the same epoch: any rank's request is every rank's (a collective)."""
        self.requested = strategy.reduce_bool(self.requested)


class SanityFlag:
    """True while the sanity check runs (its start hooks, the val loaders' request, its batches)."""

    def __init__(self) -> None:
        self.on = False

    def set(self, value: bool) -> None:
        self.on = value


class Checkpointing(Protocol):
    """What a preemption's checkpoint needs (the Trainer's public API)."""

    @property
    def checkpoint_callback(self) -> Any: ...

    @property
    def log_dir(self) -> Path: ...

    @property
    def is_global_zero(self) -> bool: ...

    def save_checkpoint(self, filepath: str | Path, weights_only: bool = False) -> None: ...
