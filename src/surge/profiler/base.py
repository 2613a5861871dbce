"""The profiler interface: what the Trainer and the training loop ask of `profiler=`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass
class LoopParts:
    """The callables the training loop uses; a profiler returns timed versions of them."""

    batches: Iterator[Any]
    move: Callable[[Any], Any] | None
    step: Callable[..., Any]
    backward: Callable[[Any], None]
    optimizer_step: Callable[[], None]
    batch_start_hooks: tuple[Any, ...]
    batch_end_hooks: tuple[Any, ...]
    publish: Callable[..., None]


class Profiler:
    """Does nothing; subclasses time what they need. `setup` at fit start, `instrument` at each
    epoch's start (the loop's parts), `finish` after fit (reports)."""

    name = "none"

    def setup(self, trainer: Any) -> None:
        """Called once when fit starts, after the model and optimizers exist."""

    def instrument(self, parts: LoopParts) -> LoopParts:
        return parts

    def finish(self, trainer: Any) -> dict[str, Any] | None:
        """Called after fit; returns the report, if any."""
        return None
