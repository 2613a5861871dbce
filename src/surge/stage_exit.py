"""Ending a stage early and cleanly once a tuner has decided (Lightning's Tuner runs `fit()` only to
tune, then stops it): the stage's teardown runs and it returns as if it had finished."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .callbacks.base import Callback


class StageExit(Exception):
    """Raised from a stage-start hook to end the stage without running it (not an error)."""


class ExitAfterTuning(Callback):
    """Ends the stage in its start hook: placed after a tuner callback, the stage only tunes."""

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        raise StageExit


def until_exit(body: Callable[[], Any]) -> Any:
    """`body()`, or None when it ends with `StageExit`."""
    try:
        return body()
    except StageExit:
        return None
