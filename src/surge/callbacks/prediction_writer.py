"""`BasePredictionWriter`: write predictions as they come (per batch) or all at once (per
epoch), each process its own part; subclass it and override the `write_on_*` methods."""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any, Literal

from ..errors import MisconfigurationError
from .base import Callback

if TYPE_CHECKING:
    from ..module import Module
    from ..trainer import Trainer


class WriteInterval(str, Enum):
    """When a `BasePredictionWriter` writes: after each batch, at the epoch's end, or both."""

    BATCH = "batch"
    EPOCH = "epoch"
    BATCH_AND_EPOCH = "batch_and_epoch"

    @property
    def on_batch(self) -> bool:
        return self in (WriteInterval.BATCH, WriteInterval.BATCH_AND_EPOCH)

    @property
    def on_epoch(self) -> bool:
        return self in (WriteInterval.EPOCH, WriteInterval.BATCH_AND_EPOCH)


class BasePredictionWriter(Callback):
    """Lightning's `BasePredictionWriter(write_interval="batch")`.

    `write_on_batch_end(trainer, module, prediction, batch_indices, batch, batch_idx,
    dataloader_idx)` after each predict batch (`"batch"`, `"batch_and_epoch"`), and
    `write_on_epoch_end(trainer, module, predictions, batch_indices)` at the predict epoch's end
    (`"epoch"`, `"batch_and_epoch"`), where `predictions` are this process's, on the CPU (one list,
    or a list per loader with several) and `batch_indices` a list per loader of each batch's
    sample indices. The indices are those this process's sampler yielded: under several processes
    each writes its own share, so name files by `trainer.global_rank`. With an epoch writer the
    predictions are kept even under `predict(return_predictions=False)`, which still returns None.
    """

    def __init__(self, write_interval: Literal["batch", "epoch", "batch_and_epoch"] = "batch") -> None:
        if write_interval not in [i.value for i in WriteInterval]:
            raise MisconfigurationError(
                f"`write_interval` should be one of {[i.value for i in WriteInterval]}."
            )
        self.interval = WriteInterval(write_interval)

    def write_on_batch_end(
        self,
        trainer: Trainer,
        pl_module: Module,
        prediction: Any,
        batch_indices: Sequence[int] | None,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int,
    ) -> None:
        """Write one batch's prediction (override it)."""
        raise NotImplementedError()

    def write_on_epoch_end(
        self, trainer: Trainer, pl_module: Module, predictions: Sequence[Any], batch_indices: Sequence[Any]
    ) -> None:
        """Write all of this process's predictions (override it)."""
        raise NotImplementedError()

    def on_predict_batch_end(
        self,
        trainer: Trainer,
        pl_module: Module,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if self.interval.on_batch:
            indices = trainer.predict_loop.current_batch_indices
            self.write_on_batch_end(trainer, pl_module, outputs, indices, batch, batch_idx, dataloader_idx)

    def on_predict_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        if self.interval.on_epoch:
            loop = trainer.predict_loop
            self.write_on_epoch_end(trainer, pl_module, loop.predictions, loop.epoch_batch_indices)
