"""`SpikeGuard`: roll training back to the last good state when the loss spikes or turns non-finite.

Each training loss is kept, detached (no op on the device, nothing read), until the next check,
every `log_every_n_steps` optimizer steps, where the loop reads its logged values anyway. There the
losses are compared on the device with the mean and variance of the good losses before them (pooled
over about `window` losses, kept as tensors): a loss above `mean + threshold * std`, or an inf/NaN,
is a spike. One flag is read there (under several processes, agreed by every rank). At a check:

- no flag: the state is good; every `snapshot_every` optimizer steps an in-memory copy of it is
  kept (model, optimizers, schedulers, precision, RNG, step; on the device the tensors live on).
- a flag: every rank restores the last snapshot, the batches trained since it are skipped (the
  loader goes on from where it stands), the learning rates are multiplied by `lr_scale`, a line
  says what happened, and the metric `rollbacks` counts it. After `max_rollbacks` rollbacks the
  next spike restores the last good state and raises `SpikeError` (the model keeps that state).

A run with a spike thus equals a run that never saw the batches from the snapshot to the check
(and scaled its rates there). The snapshot, the statistics and the count are this callback's
checkpoint state, so a run resumed from any checkpoint continues exactly as the uninterrupted run.
`Trainer(on_nonfinite="rollback")` adds a `SpikeGuard(threshold=math.inf)` (non-finite losses only)
when none is given. The mechanics live in `surge.loops.rollback`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..errors import MisconfigurationError, SurgeRuntimeError, bad_value
from .base import Callback
from .spike_guard_state import checked_state

if TYPE_CHECKING:
    from ..module import Module
    from ..trainer import Trainer

NONFINITE, NONFINITE_WEIGHTS, SPIKE = 2.0, 1.5, 1.0  # what a check finds (the larger one wins)


class SpikeError(SurgeRuntimeError):
    """The loss spiked (or turned non-finite) again after `max_rollbacks` rollbacks."""


class SpikeGuard(Callback):
    """Restore the last good state on a loss spike or a non-finite loss (see the module doc).

    Args:
        threshold: a loss above `mean + threshold * std` of the recent losses is a spike
            (`math.inf`: only inf/NaN losses count).
        window: about how many recent losses the running mean and variance follow.
        max_rollbacks: rollbacks allowed in the whole run; the next spike restores the last good
            state and raises `SpikeError`.
        lr_scale: each rollback multiplies every learning rate by this (1.0: unchanged).
        snapshot_every: keep a snapshot every this many optimizer steps, a multiple of the
            Trainer's `log_every_n_steps` (None: at every check).
        warmup: losses seen before spikes are judged (None: `window // 4`, at least 2).
    """

    def __init__(
        self,
        threshold: float = 6.0,
        window: int = 100,
        max_rollbacks: int = 3,
        lr_scale: float = 1.0,
        snapshot_every: int | None = None,
        warmup: int | None = None,
    ) -> None:
        if not threshold > 0:
            raise bad_value("threshold", threshold, "a number > 0 (math.inf: only non-finite losses)")
        if not isinstance(window, int) or window < 2:
            raise bad_value("window", window, "an int >= 2")
        if not isinstance(max_rollbacks, int) or max_rollbacks < 0:
            raise bad_value("max_rollbacks", max_rollbacks, "an int >= 0")
        if not (math.isfinite(lr_scale) and lr_scale > 0):
            raise bad_value("lr_scale", lr_scale, "a finite number > 0")
        if snapshot_every is not None and (not isinstance(snapshot_every, int) or snapshot_every < 1):
            raise bad_value("snapshot_every", snapshot_every, "an int >= 1 or None")
        if warmup is not None and (not isinstance(warmup, int) or warmup < 0):
            raise bad_value("warmup", warmup, "an int >= 0 or None")
        self.threshold, self.window, self.max_rollbacks = float(threshold), window, max_rollbacks
        self.lr_scale, self.snapshot_every = float(lr_scale), snapshot_every
        self.warmup = max(2, window // 4) if warmup is None else warmup
        self.rollbacks = 0
        self.stats: Tensor | None = None  # [mean, variance, count] on the loss's device
        self.pending: list[Tensor] = []  # the losses since the last check (detached)
        self.snapshot: dict[str, Any] | None = None  # the last good state (`surge.loops.rollback`)
        self.snapshot_due = False  # a check found the state good: kept once its batch is over

    @property
    def state_key(self) -> str:
        return self._generate_state_key(threshold=self.threshold, window=self.window)

    def check_interval(self, log_every_n_steps: int) -> int:
        """Optimizer steps between two checks; the snapshots' interval must be a multiple of it."""
        every = self.snapshot_every
        if every is not None and every % log_every_n_steps:
            raise MisconfigurationError(
                f"SpikeGuard(snapshot_every={every}) must be a multiple of Trainer(log_every_n_steps="
                f"{log_every_n_steps}): the loss is checked there, and a snapshot is only taken of a checked state."
            )
        return log_every_n_steps

    # -- per micro-batch: no op on the device -------------------------------------------------
    def watch(self, loss: Tensor) -> None:
        """Keep `loss` (detached: no kernel runs, nothing is read) for the next check."""
        self.pending.append(loss.detach())  # (a scalar or shape (1,), checked at the first batch)

    # -- at a check (a host read point) -----------------------------------------------------------
    def judge(self, weights_bad: Tensor | None = None) -> float:
        """The losses since the last check against the statistics as they stood there: 0.0 (all
        good, then folded into the statistics), `SPIKE`, `NONFINITE`, or `NONFINITE_WEIGHTS` when
        `weights_bad` (a flag on the device) says the parameters hold inf/NaN after the last update
        (a finite loss with a non-finite gradient). One host read."""
        if not self.pending and weights_bad is None:
            return 0.0
        flags, values = [], None
        if self.pending:
            values = torch.stack(self.pending).reshape(-1).float()
            self.pending = []
            if self.stats is None:
                self.stats = torch.zeros(3, device=values.device)  # mean, variance, count (capped at window)
            mean, var, count = self.stats.unbind()
            finite = values.isfinite()
            limit = (
                mean + self.threshold * var.sqrt()
                if math.isfinite(self.threshold)
                else torch.full_like(mean, math.inf)
            )
            spike = finite & (count >= self.warmup) & (values > limit)
            flags.append(torch.where(finite, spike.float() * SPIKE, torch.full_like(values, NONFINITE)).max())
        if weights_bad is not None:
            device = values.device if values is not None else weights_bad.device
            flags.append(weights_bad.to(device).float() * NONFINITE_WEIGHTS)
        flag = float(torch.stack(flags).max().item())  # host read: the check
        if flag == 0.0 and values is not None:
            self._fold(values, mean, var, count)
        return flag

    def _fold(self, values: Tensor, mean: Tensor, var: Tensor, count: Tensor) -> None:
        """Merge a check's good losses into the statistics (pooled mean and variance, the old part
        weighing at most `window`): tensor ops, no read."""
        assert self.stats is not None
        n = float(values.numel())
        b_mean = values.mean()
        b_m2 = ((values - b_mean) ** 2).sum()
        total = count + n
        delta = b_mean - mean
        new_mean = mean + delta * (n / total)
        m2 = var * count + b_m2 + delta * delta * (count * n / total)
        self.stats.copy_(torch.stack((new_mean, m2 / total, total.clamp(max=float(self.window)))))

    def setup(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        """A fit starts with no snapshot, statistics, pending losses or rollbacks of an earlier one
        (a resumed fit loads its checkpoint's after this)."""
        if stage == "fit":
            self.rollbacks, self.stats, self.pending, self.snapshot = 0, None, [], None
            self.snapshot_due = False

    # -- what the loop's rollbacks (`surge.loops.rollback`) change ---------------------------------
    def keep(self, snapshot: dict[str, Any]) -> None:
        """The last good state, as `surge.loops.rollback` took it."""
        self.snapshot = snapshot

    def rolled_back(self, stats: Tensor | None) -> None:
        """A rollback happened: one more counted, the statistics back to the snapshot's."""
        self.rollbacks += 1
        self.stats = stats

    # -- checkpoint ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        pending = torch.stack(self.pending) if self.pending else None
        return {
            "rollbacks": self.rollbacks,
            "stats": self.stats,
            "pending": pending,
            "snapshot": self.snapshot,
            "snapshot_due": self.snapshot_due,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """A checkpoint's state, checked entry by entry before any is kept (a CheckpointError names
        the entry; the snapshot is checked against the model when training starts)."""
        state = checked_state(state_dict)
        self.rollbacks = state["rollbacks"]
        self.stats = state["stats"]
        self.snapshot = state["snapshot"]
        self.snapshot_due = state["snapshot_due"]
        pending = state["pending"]
        self.pending = list(pending.unbind()) if pending is not None else []  # (stacked: one a row)
