"""`check_val_every_n_epoch=None`: validation every `val_check_interval` training batches counted
across epochs (Lightning's mode for a stream, or for an interval longer than an epoch), and the
count itself, `fit_loop.total_batch_idx`."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .validation import BatchPlan


class AcrossEpochs:
    """Counts the training batches of all epochs: derived from the epoch and the batches per epoch
    (so a resumed fit counts on), or, for a loader without a length, added up as epochs end."""

    def __init__(self) -> None:
        self.stream_before = 0  # batches of the finished epochs of a loader without a length

    def total(self, epoch: int, batches_done: int, plan: BatchPlan) -> int:
        """Training batches run so far, `batches_done` of them in epoch `epoch`."""
        n = plan.train
        if epoch == 0:
            return batches_done
        if n == math.inf:
            return self.stream_before + batches_done
        return int(epoch * n) + batches_done

    def due(self, epoch: int, batches_done: int, plan: BatchPlan) -> bool:
        """Whether validation runs after this batch: the count is a multiple of the interval."""
        return self.total(epoch, batches_done, plan) % plan.across_epochs == 0

    def at_epoch_end(self, epoch: int, batches_done: int, plan: BatchPlan) -> bool:
        """`due` at the epoch's end (no extra validation there, as in Lightning); a loader without
        a length adds its epoch's batches to the count."""
        due = self.due(epoch, batches_done, plan)
        if plan.train == math.inf:
            self.stream_before += batches_done
        return due


class FitProgress:
    """Lightning's `fit_loop.total_batch_idx`, for the fit loop."""

    ctx: Any
    epoch: int
    batches_done: int

    @property
    def total_batch_idx(self) -> int:
        """The index of the current (or last) training batch counted across epochs; -1 before any."""
        if self.ctx is None:
            return -1
        ctx = self.ctx
        return int(ctx.validation.across.total(self.epoch, self.batches_done, ctx.data.plan)) - 1
