"""The type aliases Lightning code annotates with (`STEP_OUTPUT`, `OptimizerLRScheduler`, ...)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import Tensor
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

from ...errors import bad_value
from ...optim import SchedulerConfig

_NUMBER = int | float
_METRIC = Tensor | int | float
STEP_OUTPUT = Tensor | Mapping[str, Any] | None
_EVALUATE_OUTPUT = list[Mapping[str, float]]
_PREDICT_OUTPUT = list[Any] | list[list[Any]]
LRSchedulerTypeUnion = LRScheduler | ReduceLROnPlateau
LRSchedulerConfigType = dict[str, Any]
OptimizerLRScheduler = (
    Optimizer | Sequence[Optimizer] | tuple[Sequence[Optimizer], Sequence[Any]] | Mapping[str, Any] | None
)
TRAIN_DATALOADERS = Any


class LRSchedulerConfig(SchedulerConfig):
    """Lightning's `LRSchedulerConfig(scheduler, name=None, interval="epoch", frequency=1,
    reduce_on_plateau=False, monitor=None, strict=True)`: surge's scheduler config (what
    `trainer.lr_scheduler_configs` holds), built with Lightning's positional order.
    `reduce_on_plateau` is read from the scheduler's type; a value that contradicts it is refused."""

    def __init__(
        self,
        scheduler: Any,
        name: str | None = None,
        interval: str = "epoch",
        frequency: int = 1,
        reduce_on_plateau: bool = False,
        monitor: str | None = None,
        strict: bool = True,
    ) -> None:
        super().__init__(
            scheduler=scheduler,
            interval=interval,
            frequency=frequency,
            monitor=monitor,
            strict=strict,
            name=name,
        )
        if reduce_on_plateau and not self.needs_metric:
            raise bad_value(
                "LRSchedulerConfig(reduce_on_plateau)", reduce_on_plateau, "False for this scheduler"
            )

    @property
    def reduce_on_plateau(self) -> bool:
        return self.needs_metric


EVAL_DATALOADERS = Any

__all__ = [
    "EVAL_DATALOADERS",
    "LRSchedulerConfig",
    "LRSchedulerConfigType",
    "LRSchedulerTypeUnion",
    "OptimizerLRScheduler",
    "STEP_OUTPUT",
    "TRAIN_DATALOADERS",
]
