"""The type aliases Lightning code annotates with (`STEP_OUTPUT`, `OptimizerLRScheduler`, ...)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Union

from torch import Tensor
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

_NUMBER = Union[int, float]
_METRIC = Union[Tensor, _NUMBER]
STEP_OUTPUT = Union[Tensor, Mapping[str, Any], None]
_EVALUATE_OUTPUT = list[Mapping[str, float]]
_PREDICT_OUTPUT = Union[list[Any], list[list[Any]]]
LRSchedulerTypeUnion = Union[LRScheduler, ReduceLROnPlateau]
LRSchedulerConfigType = dict[str, Any]
OptimizerLRScheduler = Union[
    Optimizer, Sequence[Optimizer], tuple[Sequence[Optimizer], Sequence[Any]], Mapping[str, Any], None
]
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
