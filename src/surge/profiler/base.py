"""The profiler interface: what the Trainer and the training loop ask of `profiler=`."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..trainer import Trainer


@dataclass
class LoopParts:
    """The callables the training loop uses; a profiler returns timed versions of them."""

    batches: Iterator[Any]
    move: Callable[[Any], Any] | None
    step: Callable[..., Any]
    backward: Callable[[Any], None]
    optimizer_step: Callable[..., None]
    start_module: Callable[..., Any] | None  # the module's on_train_batch_start, if overridden
    start_callbacks: Sequence[Callable[..., Any]]  # the callbacks' on_train_batch_start
    end_module: Callable[..., Any] | None
    end_callbacks: Sequence[Callable[..., Any]]
    publish: Callable[..., None]


class Profiler:
    """Does nothing; subclasses time what they need. `setup` at fit start, `instrument` at each
    epoch's start (the loop's parts), `finish` after fit (reports)."""

    name = "none"

    def setup(self, trainer: Trainer) -> None:
        """Called once when fit starts, after the model and optimizers exist."""

    def callbacks(self) -> list[Any]:
        """Callbacks the profiler needs (e.g. to time validation); not listed in `trainer.callbacks`."""
        return []

    def instrument(self, parts: LoopParts) -> LoopParts:
        return parts

    def finish(self, trainer: Trainer) -> dict[str, Any] | None:
        """Called after fit; returns the report, if any."""
        return None
