"""Ending a stage early and cleanly once a tuner has decided (Lightning's Tuner runs `fit()` only to
tune, then stops it): the stage's teardown runs and it returns as if it had finished."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..callbacks.base import Callback

if TYPE_CHECKING:
    from ..trainer import Trainer


class StageExit(Exception):
    """Raised from a stage-start hook to end the stage without running it (not an error)."""


class ExitAfterTuning(Callback):
    """Ends `stage` ("fit", "validate", "test" or "predict") in its start hook: placed after a tuner
    callback, the stage only tunes."""

    def __init__(self, stage: str) -> None:
        self.stage = stage

    def _end(self, trainer: Trainer, stage: str) -> None:
        if stage == self.stage and trainer.state.fn == stage and not trainer.sanity_checking:
            raise StageExit

    def on_fit_start(self, trainer: Trainer, pl_module: Any) -> None:
        self._end(trainer, "fit")

    def on_validation_start(self, trainer: Trainer, pl_module: Any) -> None:
        self._end(trainer, "validate")

    def on_test_start(self, trainer: Trainer, pl_module: Any) -> None:
        self._end(trainer, "test")

    def on_predict_start(self, trainer: Trainer, pl_module: Any) -> None:
        self._end(trainer, "predict")
