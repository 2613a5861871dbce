"""`Timer`: stop training once a time budget is spent; time each stage (Lightning's)."""

from __future__ import annotations

import re
import time
from datetime import timedelta
from typing import Any

from ..errors import bad_value
from ..rank_zero import info
from .base import Callback

STAGES = ("train", "sanity_check", "validate", "test", "predict")
INTERVALS = ("step", "epoch")


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
        if isinstance(duration, str):
            match = re.fullmatch(r"(\d+):(\d\d):(\d\d):(\d\d)", duration.strip())
            if not match:
                raise bad_value("Timer(duration)", duration, 'a string "DD:HH:MM:SS"')
            d, h, m, s = (int(g) for g in match.groups())
            duration = timedelta(days=d, hours=h, minutes=m, seconds=s)
        elif isinstance(duration, dict):
            try:
                duration = timedelta(**duration)
            except TypeError as err:
                raise bad_value("Timer(duration)", duration, f"timedelta arguments ({err})") from None
        elif duration is not None and not isinstance(duration, timedelta):
            raise bad_value("Timer(duration)", duration, 'None, "DD:HH:MM:SS", a timedelta or a dict')
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

    def on_train_start(self, trainer: Any, module: Any) -> None:
        self._begin("train")

    def on_train_end(self, trainer: Any, module: Any) -> None:
        self._end("train")

    def on_validation_start(self, trainer: Any, module: Any) -> None:
        self._begin("sanity_check" if trainer.sanity_checking else "validate")

    def on_validation_end(self, trainer: Any, module: Any) -> None:
        self._end("sanity_check" if trainer.sanity_checking else "validate")

    def on_test_start(self, trainer: Any, module: Any) -> None:
        self._begin("test")

    def on_test_end(self, trainer: Any, module: Any) -> None:
        self._end("test")

    def on_predict_start(self, trainer: Any, module: Any) -> None:
        self._begin("predict")

    def on_predict_end(self, trainer: Any, module: Any) -> None:
        self._end("predict")

    def on_fit_start(self, trainer: Any, module: Any) -> None:
        if self._duration is not None:  # a restored timer may be spent already
            self._check_time_remaining(trainer)

    def on_train_batch_end(self, trainer: Any, module: Any, *args: Any) -> None:
        if self._interval == "step" and self._duration is not None:
            self._check_time_remaining(trainer)

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        if self._interval == "epoch" and self._duration is not None:
            self._check_time_remaining(trainer)

    def _check_time_remaining(self, trainer: Any) -> None:
        assert self._duration is not None
        stop = self.time_elapsed() >= self._duration
        if trainer.world_size > 1:
            stop = trainer.strategy.broadcast(stop)  # every rank stops at the same step
        trainer.should_stop = trainer.should_stop or stop
        if stop and self._verbose:
            elapsed = timedelta(seconds=int(self.time_elapsed()))
            info(f"Time limit reached. Elapsed time is {elapsed}. Signaling Trainer to stop.")

    def state_dict(self) -> dict[str, Any]:
        return {"time_elapsed": {stage: self.time_elapsed(stage) for stage in STAGES}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._offset = state_dict.get("time_elapsed", {}).get("train", 0.0)
