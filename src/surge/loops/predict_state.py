"""What the predict stage shows while it runs (Lightning's `trainer.predict_loop`): the sampler's
indices of the current batch and of every batch so far, per loader, and the predictions kept.

The indices are recorded only when a prediction writer asks for them (`begin(..., indices=True)`):
the stage then iterates a copy of each DataLoader whose batch sampler notes the indices it yields.
The user's loader is not changed."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader

from ..data import apply_to_tensors
from ..rank_zero import warn
from .predict import run_prediction

if TYPE_CHECKING:
    from .context import RunParts


class IndexRecorder:
    """A batch sampler that yields its sampler's batches and keeps each one's indices (`seen`)."""

    def __init__(self, batch_sampler: Iterable[Sequence[int]]) -> None:
        self.batch_sampler = batch_sampler
        self.seen: list[list[int]] = []

    def __iter__(self) -> Iterator[Sequence[int]]:
        self.seen = []
        for indices in self.batch_sampler:
            self.seen.append(list(indices))
            yield indices

    def __len__(self) -> int:
        return len(self.batch_sampler)  # type: ignore[arg-type]


def recording(loader: Iterable) -> tuple[Iterable, IndexRecorder | None]:
    """A copy of `loader` whose batch sampler records its indices, with the recorder; the loader
    itself and None when it has no batch sampler (not a DataLoader, or `batch_size=None`)."""
    if not isinstance(loader, DataLoader) or loader.batch_sampler is None:
        return loader, None
    recorder = IndexRecorder(loader.batch_sampler)
    copied = copy.copy(loader)
    copied.__dict__["_iterator"] = None  # the user's running workers stay the user's
    copied.__dict__["batch_sampler"] = recorder  # DataLoader refuses the attribute once built
    return copied, recorder


class PredictLoop:
    """`trainer.predict_loop`: `current_batch_indices`, `epoch_batch_indices` (loaders x batches x
    samples), `predictions` (the kept ones: one list, or a list per loader with several) and
    `return_predictions`, as Lightning's loop has them."""

    def __init__(self) -> None:
        self.return_predictions = True
        self.current_batch_indices: list[int] = []
        self.epoch_batch_indices: list[list[list[int]]] = []
        self._predictions: list[list[Any]] = []
        self._recorders: list[IndexRecorder | None] = []
        self._keep = True
        self._batch_indices = self._epoch_indices = False
        self._warned = False

    def run(
        self,
        parts: RunParts,
        loaders: Sequence[Iterable],
        limits: Sequence[int | float],
        callbacks: Sequence[object],
        returned: bool,
    ) -> list[Any]:
        """The predict stage over `loaders` (see `run_prediction`), with `begin`'s loaders."""
        return run_prediction(parts, self.begin(loaders, callbacks, returned), limits, self)

    def begin(
        self, loaders: Sequence[Iterable], callbacks: Sequence[object], returned: bool
    ) -> list[Iterable]:
        """A run over `loaders` (`returned`: `predict`'s `return_predictions` is not False); the
        loaders to iterate: recording copies when one of `callbacks` is a prediction writer."""
        from ..callbacks.prediction_writer import BasePredictionWriter

        writers = [cb.interval for cb in callbacks if isinstance(cb, BasePredictionWriter)]
        self.return_predictions, self._warned = returned, False
        self._batch_indices = any(w.on_batch for w in writers)
        self._epoch_indices = any(w.on_epoch for w in writers)
        self._keep = returned or self._epoch_indices  # an epoch writer gets them anyway
        self.epoch_batch_indices = [[] for _ in loaders]
        self._predictions = [[] for _ in loaders]
        if not writers:
            self._recorders = [None for _ in loaders]
            return list(loaders)
        pairs = [recording(loader) for loader in loaders]
        self._recorders = [recorder for _, recorder in pairs]
        return [loader for loader, _ in pairs]

    def at_batch(self, dataloader_idx: int, batch_idx: int) -> None:
        """Note the batch's indices (when a writer asked for them), before its hooks run."""
        if not (self._batch_indices or self._epoch_indices):
            return
        recorder = self._recorders[dataloader_idx]
        if recorder is None:
            if not self._warned:
                self._warned = True
                warn("Couldn't infer the batch indices fetched from your dataloader")
            return
        indices = recorder.seen[batch_idx]
        if self._epoch_indices:
            self.epoch_batch_indices[dataloader_idx].append(indices)
        if self._batch_indices:
            self.current_batch_indices = indices

    def keep(self, prediction: Any, dataloader_idx: int) -> None:
        """Keep the batch's prediction (on the CPU, as Lightning keeps it) if predictions are kept."""
        if self._keep:
            self._predictions[dataloader_idx].append(apply_to_tensors(prediction, torch.Tensor.cpu))

    @property
    def predictions(self) -> list[Any]:
        """The kept predictions: one loader's list, or a list per loader."""
        if not self._predictions:
            return []
        return self._predictions[0] if len(self._predictions) == 1 else self._predictions

    def end(self) -> list[list[Any]]:
        """The run's predictions per loader; the loop then keeps them only if they are returned."""
        kept = self._predictions
        if not self.return_predictions:
            self._predictions = []
        self.epoch_batch_indices = []
        return kept
