"""`Timer` (and `Trainer(max_time=...)`): stop training once a time budget is spent; time each
stage (Lightning's)."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..errors import bad_value
from ..rank_zero import info
from .base import Callback

if TYPE_CHECKING:
    from ..trainer import Trainer
    from .trainer_views import Stopping

STAGES = ("train", "sanity_check", "validate", "test", "predict")
INTERVALS = ("step", "epoch")


def parse_duration(value: Any, arg: str) -> timedelta | None:
    """`arg` (`max_time`, `Timer(duration)`) as a timedelta: "DD:HH:MM:SS", a dict of timedelta's
    arguments, or a timedelta; None stays None."""
    allowed = '"DD:HH:MM:SS", a dict such as {"hours": 2} or a datetime.timedelta, more than zero'
    if value is None:
        return None
    if isinstance(value, str):
        parts = value.split(":")
        if len(parts) != 4 or not all(p.strip().isdigit() for p in parts):
            raise bad_value(arg, value, allowed)
        days, hours, minutes, seconds = (int(p) for p in parts)
        value = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    elif isinstance(value, dict):
        known = {"weeks", "days", "hours", "minutes", "seconds", "milliseconds", "microseconds"}
        if (
            not value
            or set(value) - known
            or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value.values())
        ):
            raise bad_value(arg, value, f"{allowed} (dict keys among {sorted(known)}, numbers)")
        value = timedelta(**value)
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise bad_value(arg, value, allowed)
    return value


class Timer(Callback):
    """`duration`: "DD:HH:MM:SS", a `timedelta`, a dict of `timedelta` arguments, or None (only
    time). At each `interval` ("step" or "epoch") it sets `trainer.should_stop` once the training
    time (resumed runs included) reaches the duration."""

    def __init__(
        self,
        duration: str | timedelta | dict[str, int] | None = None,
        interval: str = "step",
        verbose: bool = True,
    ) -> None:
        duration = parse_duration(duration, "Timer(duration)")
        if interval not in INTERVALS:
            raise bad_value("Timer(interval)", interval, f"one of {INTERVALS}")
        self._duration = duration.total_seconds() if duration is not None else None
        self._interval = interval
        self._verbose = verbose
        self._start_time: dict[str, float | None] = dict.fromkeys(STAGES)
        self._end_time: dict[str, float | None] = dict.fromkeys(STAGES)
        self._offset = 0.0

    def start_time(self, stage: str = "train") -> float | None:
        return self._start_time[stage]

    def end_time(self, stage: str = "train") -> float | None:
        return self._end_time[stage]

    def time_elapsed(self, stage: str = "train") -> float:
        """Seconds spent in `stage` (for "train", a resumed run's earlier time included)."""
        start, end = self._start_time[stage], self._end_time[stage]
        offset = self._offset if stage == "train" else 0.0
        if start is None:
            return offset
        return (time.monotonic() if end is None else end) - start + offset

    def time_remaining(self, stage: str = "train") -> float | None:
        return self._duration - self.time_elapsed(stage) if self._duration is not None else None

    def _begin(self, stage: str) -> None:
        self._start_time[stage], self._end_time[stage] = time.monotonic(), None

    def _end(self, stage: str) -> None:
        self._end_time[stage] = time.monotonic()

    def on_train_start(self, trainer: Trainer, module: Any) -> None:
        self._begin("train")

    def on_train_end(self, trainer: Trainer, module: Any) -> None:
        self._end("train")

    def on_validation_start(self, trainer: Trainer, module: Any) -> None:
        self._begin("sanity_check" if trainer.sanity_checking else "validate")

    def on_validation_end(self, trainer: Trainer, module: Any) -> None:
        self._end("sanity_check" if trainer.sanity_checking else "validate")

    def on_test_start(self, trainer: Trainer, module: Any) -> None:
        self._begin("test")

    def on_test_end(self, trainer: Trainer, module: Any) -> None:
        self._end("test")

    def on_predict_start(self, trainer: Trainer, module: Any) -> None:
        self._begin("predict")

    def on_predict_end(self, trainer: Trainer, module: Any) -> None:
        self._end("predict")

    def on_fit_start(self, trainer: Trainer, module: Any) -> None:
        if self._duration is not None:  # a restored timer may be spent already
            self._check_time_remaining(trainer)

    def on_train_batch_end(self, trainer: Trainer, module: Any, *args: Any) -> None:
        if self._interval != "step" or self._duration is None:
            return
        if trainer.world_size > 1 and trainer.global_step % max(1, trainer.log_every_n_steps):
            return  # ranks agree at log intervals (one small collective there), not every step
        self._check_time_remaining(trainer)

    def on_train_epoch_end(self, trainer: Trainer, module: Any) -> None:
        if self._interval == "epoch" and self._duration is not None:
            self._check_time_remaining(trainer)

    def _check_time_remaining(self, trainer: Stopping) -> None:
        assert self._duration is not None
        stop = self.time_elapsed() >= self._duration
        if trainer.world_size > 1:
            stop = trainer.strategy.reduce_bool(stop)  # every rank stops at the same step
        trainer.should_stop = trainer.should_stop or stop
        if stop and self._verbose:
            elapsed = timedelta(seconds=int(self.time_elapsed()))
            info(f"Time limit reached. Elapsed time is {elapsed}. Signaling Trainer to stop.")

    def state_dict(self) -> dict[str, Any]:
        return {"time_elapsed": {stage: self.time_elapsed(stage) for stage in STAGES}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._offset = state_dict.get("time_elapsed", {}).get("train", 0.0)
