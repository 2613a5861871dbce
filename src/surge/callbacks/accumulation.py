"""`GradientAccumulationScheduler`: the accumulation window changes with the epoch (Lightning's)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import MisconfigurationError, SurgeTypeError
from .base import Callback

if TYPE_CHECKING:
    from ..trainer import Trainer


class GradientAccumulationScheduler(Callback):
    """`scheduling={epoch: factor}`: from each listed epoch (0-based) on, accumulate `factor`
    batches per optimizer step; before the first listed epoch the factor is 1.

    It sets `trainer.accumulate_grad_batches` in `on_train_epoch_start`; the fit loop reads it
    once per epoch, after that hook. Not with manual optimization, nor with the Trainer's own
    `accumulate_grad_batches` (or `effective_batch_size`) other than 1.
    """

    def __init__(self, scheduling: dict[int, int]) -> None:
        if not isinstance(scheduling, dict) or not scheduling:
            raise SurgeTypeError(
                f"GradientAccumulationScheduler(scheduling={scheduling!r}) is not valid: "
                "a non-empty dict {epoch: factor}."
            )
        if any(isinstance(k, bool) or not isinstance(k, int) or k < 0 for k in scheduling):
            raise MisconfigurationError(
                f"GradientAccumulationScheduler(scheduling=) epochs must be ints >= 0, got {list(scheduling)}."
            )
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in scheduling.values()):
            raise MisconfigurationError(
                "GradientAccumulationScheduler(scheduling=) factors must be ints >= 1, "
                f"got {list(scheduling.values())}."
            )
        self.scheduling = {0: 1, **scheduling} if min(scheduling) != 0 else dict(scheduling)
        self.epochs = sorted(self.scheduling)

    def going_to_accumulate_grad_batches(self) -> bool:
        return any(v > 1 for v in self.scheduling.values())

    def get_accumulate_grad_batches(self, epoch: int) -> int:
        """The factor in force at `epoch`."""
        return next((self.scheduling[e] for e in reversed(self.epochs) if epoch >= e), 1)

    def on_train_start(self, trainer: Trainer, module: Any) -> None:
        if not module.automatic_optimization:
            raise MisconfigurationError(
                "GradientAccumulationScheduler needs automatic optimization; with "
                "automatic_optimization=False accumulate by hand, or remove the callback."
            )
        if trainer.accumulate_grad_batches != 1:
            raise MisconfigurationError(
                f"Trainer(accumulate_grad_batches=...) is {trainer.accumulate_grad_batches} (or set by "
                "effective_batch_size=) and a GradientAccumulationScheduler is in callbacks: "
                "remove one of them."
            )

    def on_train_epoch_start(self, trainer: Trainer, module: Any) -> None:
        trainer.accumulate_grad_batches = self.get_accumulate_grad_batches(trainer.current_epoch)
