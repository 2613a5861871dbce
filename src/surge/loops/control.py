"""What the fit loop asks of whoever runs it, as typed objects rather than the Trainer itself.

`StopRequest` is Lightning's `trainer.should_stop` (callbacks set it through the Trainer's property;
the loop reads it and makes the ranks agree); `SanityFlag` is `trainer.sanity_checking`. What a
preemption needs to write its checkpoint is `Checkpointing`, in callbacks/trainer_views.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
