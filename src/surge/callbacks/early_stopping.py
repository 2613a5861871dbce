"""`EarlyStopping`: stop when a monitored metric stops improving, reaches a goal, diverges or is
not finite; `stopping_reason` says which (Lightning's `EarlyStoppingReason`)."""

from __future__ import annotations

import logging
import math
from enum import Enum
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..errors import MisconfigurationError, SurgeRuntimeError, bad_value
from ..rank_zero import warn
from .base import Callback

if TYPE_CHECKING:
    from ..trainer import Trainer
    from .trainer_views import StopCheck

log = logging.getLogger(__name__)


class EarlyStoppingReason(Enum):
    """Why `EarlyStopping` stopped the fit (Lightning's values)."""

    NOT_STOPPED = 0
    STOPPING_THRESHOLD = 1
    DIVERGENCE_THRESHOLD = 2
    PATIENCE_EXHAUSTED = 3
    NON_FINITE_METRIC = 4


class EarlyStopping(Callback):
    """Stops training after `patience` checks without an improvement of more than `min_delta`, at
    once when the value passes `stopping_threshold` (good enough) or `divergence_threshold` (beyond
    hope), or is NaN/inf with `check_finite`.

    Checks at the end of each training epoch when validation runs once per epoch, else after each
    validation (`check_on_train_epoch_end` decides when given). `callback_metrics` are identical on
    every process; a stop on any process stops all. `min_delta` is kept signed as in Lightning
    (negative in "min" mode); `best_score` is a tensor.
    """

    mode_dict = {"min": torch.lt, "max": torch.gt}
    order_dict = {"min": "<", "max": ">"}

    def __init__(
        self,
        monitor: str,
        min_delta: float = 0.0,
        patience: int = 3,
        verbose: bool = False,
        mode: str = "min",
        strict: bool = True,
        check_finite: bool = True,
        stopping_threshold: float | None = None,
        divergence_threshold: float | None = None,
        check_on_train_epoch_end: bool | None = None,
        log_rank_zero_only: bool = False,
    ) -> None:
        if mode not in self.mode_dict:
            raise MisconfigurationError(f"`mode` can be min, max, got {mode} (EarlyStopping(mode={mode!r})).")
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 0:
            raise bad_value("EarlyStopping(patience)", patience, "an int >= 0")
        for name, value in (
            ("min_delta", min_delta),
            ("stopping_threshold", stopping_threshold),
            ("divergence_threshold", divergence_threshold),
        ):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise bad_value(
                    f"EarlyStopping({name})", value, "a number" + (" or None" if name != "min_delta" else "")
                )
        self.monitor, self.mode, self.patience, self.verbose = monitor, mode, patience, verbose
        self.strict, self.check_finite, self.log_rank_zero_only = strict, check_finite, log_rank_zero_only
        self.stopping_threshold, self.divergence_threshold = stopping_threshold, divergence_threshold
        self.min_delta = float(min_delta) * (1 if mode == "max" else -1)
        self.check_on_train_epoch_end = check_on_train_epoch_end
        self.wait_count = 0
        self.stopped_epoch = 0
        self.best_score = torch.tensor(math.inf if mode == "min" else -math.inf)
        self.stopping_reason = EarlyStoppingReason.NOT_STOPPED
        self.stopping_reason_message: str | None = None
        self._on_train_epoch_end = check_on_train_epoch_end

    @property
    def monitor_op(self) -> Any:
        return self.mode_dict[self.mode]

    @property
    def state_key(self) -> str:
        return self._generate_state_key(monitor=self.monitor, mode=self.mode)

    def setup(self, trainer: Trainer, pl_module: Any, stage: str) -> None:
        if self.check_on_train_epoch_end is None:  # validation once per epoch: check at its end
            self._on_train_epoch_end = (
                trainer.val_check_interval == 1.0 and trainer.check_val_every_n_epoch == 1
            )
        else:
            self._on_train_epoch_end = self.check_on_train_epoch_end

    def _skip(self, trainer: StopCheck) -> bool:
        return not trainer.fitting or trainer.sanity_checking

    def on_train_epoch_end(self, trainer: Trainer, module: Any) -> None:
        if self._on_train_epoch_end and not self._skip(trainer):
            self._check(trainer)

    def on_validation_end(self, trainer: Trainer, module: Any) -> None:
        if not self._on_train_epoch_end and not self._skip(trainer):
            self._check(trainer)

    def _check(self, trainer: StopCheck) -> None:
        if trainer.fast_dev_run:
            return  # a fast_dev_run does not stop early, as in Lightning
        metrics = trainer.callback_metrics
        if self.monitor not in metrics:
            message = (
                f"EarlyStopping(monitor={self.monitor!r}): the metric is not available. Log it with "
                f"self.log({self.monitor!r}, value), or monitor one of: {', '.join(metrics)}"
            )
            if self.strict:
                raise SurgeRuntimeError(message)
            if self.verbose:
                warn(message)
            return
        current = metrics[self.monitor].detach().float().reshape(()).cpu()  # host read: once per check
        should_stop, reason = self._evaluate_stopping_criteria(current)
        if trainer.world_size > 1:
            should_stop = trainer.strategy.reduce_bool(should_stop)  # any process stopping stops all
        trainer.should_stop = trainer.should_stop or should_stop
        if should_stop:
            self.stopped_epoch = trainer.current_epoch
            self.stopping_reason_message = reason
        if reason and self.verbose:
            rank = trainer.global_rank if trainer.world_size > 1 else None
            if rank is None or not self.log_rank_zero_only or rank == 0:
                log.info(f"[rank: {rank}] {reason}" if rank is not None else reason)

    def _evaluate_stopping_criteria(self, current: Tensor) -> tuple[bool, str | None]:
        """(stop?, why) for this value; updates the best score, the wait and the reason."""
        op, sign = self.monitor_op, self.order_dict[self.mode]
        value = float(current)
        if self.check_finite and not math.isfinite(value):
            self.stopping_reason = EarlyStoppingReason.NON_FINITE_METRIC
            return True, (
                f"Monitored metric {self.monitor} = {current} is not finite. "
                f"Previous best value was {float(self.best_score):.3f}. Signaling Trainer to stop."
            )
        if self.stopping_threshold is not None and op(current, self.stopping_threshold):
            self.stopping_reason = EarlyStoppingReason.STOPPING_THRESHOLD
            return True, (
                f"Stopping threshold reached: {self.monitor} = {current} {sign} {self.stopping_threshold}. "
                "Signaling Trainer to stop."
            )
        if self.divergence_threshold is not None and op(-current, -self.divergence_threshold):
            self.stopping_reason = EarlyStoppingReason.DIVERGENCE_THRESHOLD
            return True, (
                f"Divergence threshold reached: {self.monitor} = {current} {sign} {self.divergence_threshold}. "
                "Signaling Trainer to stop."
            )
        if op(current - self.min_delta, self.best_score.to(current.device)):
            improved = (
                f"Metric {self.monitor} improved by {abs(float(self.best_score) - value):.3f} >= "
                f"min_delta = {abs(self.min_delta)}. New best score: {value:.3f}"
                if math.isfinite(float(self.best_score))
                else f"Metric {self.monitor} improved. New best score: {value:.3f}"
            )
            self.best_score, self.wait_count = current, 0
            return False, improved
        self.wait_count += 1
        if self.wait_count >= self.patience:
            self.stopping_reason = EarlyStoppingReason.PATIENCE_EXHAUSTED
            return True, (
                f"Monitored metric {self.monitor} did not improve in the last {self.wait_count} records. "
                f"Best score: {float(self.best_score):.3f}. Signaling Trainer to stop."
            )
        return False, None

    def state_dict(self) -> dict[str, Any]:
        return {
            "wait_count": self.wait_count,
            "stopped_epoch": self.stopped_epoch,
            "best_score": self.best_score,
            "patience": self.patience,
            "stopping_reason": self.stopping_reason.value,
            "stopping_reason_message": self.stopping_reason_message,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.wait_count, self.stopped_epoch = state["wait_count"], state["stopped_epoch"]
        best = state["best_score"]
        self.best_score = best if isinstance(best, Tensor) else torch.tensor(float(best))
        self.patience = state.get("patience", self.patience)
        self.stopping_reason = EarlyStoppingReason(state.get("stopping_reason", 0))
        self.stopping_reason_message = state.get("stopping_reason_message")
