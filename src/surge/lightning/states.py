"""`lightning.pytorch.trainer.states`: `TrainerFn`, `RunningStage`, `TrainerStatus`, `TrainerState`
(what `trainer.state` holds)."""

from __future__ import annotations

from ..loops.run_status import RunningStage, TrainerFn, TrainerState, TrainerStatus

__all__ = ["RunningStage", "TrainerFn", "TrainerState", "TrainerStatus"]
