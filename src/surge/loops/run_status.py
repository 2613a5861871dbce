"""What a Trainer is doing, in Lightning's terms: `trainer.state.status` (initializing, running,
finished, interrupted), `.fn` (the entry point called last: fit, validate, test, predict) and
`.stage` (what runs now: train, sanity_check, validate, test, predict). The members are strings
(`TrainerFn.FITTING == "fit"`), as Lightning's are."""

from __future__ import annotations

from dataclasses import dataclass

from ..config.str_enum import StrEnum


class TrainerStatus(StrEnum):
    """Whether the Trainer has not run yet, runs, or ended normally or by an exception."""

    INITIALIZING = "initializing"
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"

    @property
    def stopped(self) -> bool:
        return self in (TrainerStatus.FINISHED, TrainerStatus.INTERRUPTED)


class TrainerFn(StrEnum):
    """The Trainer's entry points."""

    FITTING = "fit"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"


class RunningStage(StrEnum):
    """What runs inside an entry point (fit runs sanity_check, train and validate)."""

    TRAINING = "train"
    SANITY_CHECKING = "sanity_check"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"

    @property
    def evaluating(self) -> bool:
        return self in (RunningStage.VALIDATING, RunningStage.TESTING, RunningStage.SANITY_CHECKING)

    @property
    def dataloader_prefix(self) -> str | None:
        """The prefix of the stage's `*_dataloader` hook (`val` for validation and the sanity check)."""
        if self in (RunningStage.VALIDATING, RunningStage.SANITY_CHECKING):
            return "val"
        return str(self.value)


@dataclass
class TrainerState:
    """A snapshot of the Trainer's status, entry point and stage (`trainer.state` makes one per read)."""

    status: TrainerStatus = TrainerStatus.INITIALIZING
    fn: TrainerFn | None = None
    stage: RunningStage | None = None

    @property
    def finished(self) -> bool:
        return self.status == TrainerStatus.FINISHED

    @property
    def stopped(self) -> bool:
        return self.status.stopped


def trainer_state(run: str, fn: str | None, stage: RunningStage | None) -> TrainerState:
    """The state for surge's run status (`initializing`, a stage name while it runs, `finished`,
    `interrupted` or `failed`; Lightning counts a failure as interrupted) and the last entry point."""
    if run == "initializing":
        return TrainerState()
    status = {"finished": TrainerStatus.FINISHED, "interrupted": TrainerStatus.INTERRUPTED,
              "failed": TrainerStatus.INTERRUPTED}.get(run, TrainerStatus.RUNNING)  # fmt: skip
    return TrainerState(
        status, TrainerFn(fn) if fn else None, stage if status == TrainerStatus.RUNNING else None
    )
