"""`EarlyStopping`: stop when a monitored metric stops improving."""

from __future__ import annotations

import math
from typing import Any

from ..errors import MisconfigurationError, bad_value
from ..rank_zero import info
from .base import Callback


class EarlyStopping(Callback):
    """Stops training after `patience` checks without an improvement of at least `min_delta`.

    Checks at the end of each validation (or of each training epoch when there is no validation).
    `callback_metrics` are identical on every process, so every process decides the same.
    """

    def __init__(
        self,
        monitor: str,
        mode: str = "min",
        patience: int = 3,
        min_delta: float = 0.0,
        strict: bool = True,
        check_finite: bool = True,
        verbose: bool = False,
        check_on_train_epoch_end: bool | None = None,
    ) -> None:
        if mode not in ("min", "max"):
            raise bad_value("EarlyStopping(mode)", mode, '"min" or "max"')
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 0:
            raise bad_value("EarlyStopping(patience)", patience, "an int >= 0")
        if min_delta < 0:
            raise bad_value("EarlyStopping(min_delta)", min_delta, "a number >= 0")
        self.monitor, self.mode, self.patience, self.min_delta = monitor, mode, patience, float(min_delta)
        self.strict, self.check_finite, self.verbose = strict, check_finite, verbose
        self.check_on_train_epoch_end = check_on_train_epoch_end
        self.wait_count = 0
        self.best_score = math.inf if mode == "min" else -math.inf
        self.stopped_epoch = 0
        self.stopping_reason = ""

    @property
    def state_key(self) -> str:
        return f"EarlyStopping{{monitor={self.monitor!r}, mode={self.mode!r}}}"

    def _on_train_end_check(self, trainer: Any) -> bool:
        if self.check_on_train_epoch_end is not None:
            return self.check_on_train_epoch_end
        return not trainer.enable_validation

    def on_validation_end(self, trainer: Any, module: Any) -> None:
        if not trainer.sanity_checking and trainer.fitting and not self._on_train_end_check(trainer):
            self._check(trainer)

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        if self._on_train_end_check(trainer):
            self._check(trainer)

    def _check(self, trainer: Any) -> None:
        if trainer.fast_dev_run:
            return  # a fast_dev_run does not stop early, as in Lightning
        metrics = trainer.callback_metrics
        if self.monitor not in metrics:
            if self.strict:
                raise MisconfigurationError(
                    f"EarlyStopping(monitor={self.monitor!r}): the metric was not logged; logged: {sorted(metrics)}"
                )
            return
        value = float(metrics[self.monitor])
        if self.check_finite and not math.isfinite(value):
            self._stop(trainer, f"{self.monitor} = {value} is not finite")
            return
        improved = (
            value < self.best_score - self.min_delta
            if self.mode == "min"
            else value > self.best_score + self.min_delta
        )
        if improved:
            self.best_score, self.wait_count = value, 0
            return
        self.wait_count += 1
        if self.wait_count >= self.patience:
            self._stop(
                trainer,
                f"{self.monitor} did not improve in {self.wait_count} checks (best {self.best_score:.6g})",
            )

    def _stop(self, trainer: Any, reason: str) -> None:
        trainer.should_stop = True
        self.stopped_epoch = trainer.current_epoch
        self.stopping_reason = reason
        info(f"EarlyStopping: {reason}; stopping at epoch {trainer.current_epoch}.")

    def state_dict(self) -> dict[str, Any]:
        return {
            "wait_count": self.wait_count,
            "best_score": self.best_score,
            "stopped_epoch": self.stopped_epoch,
            "patience": self.patience,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.wait_count, self.best_score = state["wait_count"], state["best_score"]
        self.stopped_epoch = state["stopped_epoch"]
