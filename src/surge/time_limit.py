"""`Trainer(max_time=...)`: stop training at the first step boundary after a wall-clock budget, as
Lightning's Timer does; the checkpoint callback then saves where it stopped."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from .callbacks.base import Callback
from .rank_zero import info


class TimeLimit(Callback):
    """Sets `trainer.should_stop` once training has run `duration` (resumed runs count the time
    their checkpoint recorded). Reads only the host clock; with several processes they agree at
    log intervals (one small all_reduce there), so every rank stops at the same step."""

    def __init__(self, duration: timedelta) -> None:
        self.duration = duration.total_seconds()
        self._start: float | None = None
        self._before = 0.0  # seconds trained before a resume
        self._said = False

    def elapsed(self) -> float:
        """Seconds of training so far, this run and before its resume."""
        return self._before + (time.monotonic() - self._start if self._start is not None else 0.0)

    def on_train_start(self, trainer: Any, module: Any) -> None:
        self._start = time.monotonic()

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.world_size > 1 and trainer.global_step % trainer.log_every_n_steps:
            return
        self._check(trainer)

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        self._check(trainer)

    def _check(self, trainer: Any) -> None:
        over = self.elapsed() >= self.duration
        if trainer.world_size > 1:
            over = trainer.strategy.reduce_bool(over)
        if over:
            trainer.should_stop = True
            if not self._said:
                self._said = True
                info(
                    f"max_time reached ({timedelta(seconds=self.duration)}): stopping at step {trainer.global_step}"
                )

    def state_dict(self) -> dict[str, Any]:
        return {"elapsed": self.elapsed()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._before = float(state.get("elapsed", 0.0))
