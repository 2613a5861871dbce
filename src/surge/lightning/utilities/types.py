"""The type aliases Lightning code annotates with (`STEP_OUTPUT`, `OptimizerLRScheduler`, ...)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import Tensor
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

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
EVAL_DATALOADERS = Any

__all__ = [
    "EVAL_DATALOADERS",
    "LRSchedulerConfigType",
    "LRSchedulerTypeUnion",
    "OptimizerLRScheduler",
    "STEP_OUTPUT",
    "TRAIN_DATALOADERS",
]
