"""What `surge doctor` asks of every Trainer in the script it runs (profile a short fit), and whether
this process is such a run: read by each `Trainer(...)`, apart from the report (`doctor.py`), so a
plain run does not import what builds the report."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..callbacks.base import Callback

if TYPE_CHECKING:
    from ..trainer import Trainer

DOCTOR_ENV = "SURGE_DOCTOR"  # how `surge doctor` tells the script it runs (a separate process)


@dataclass(frozen=True)
class DoctorRun:
    """What `surge doctor` asks of every Trainer in the script it runs: profile, and end the fit after
    `steps` optimizer steps as an early stop does (so validation runs once, on 5 batches, and the
    script goes on to its end with the metrics it reads), so the diagnosis comes in about a minute."""

    steps: int = 100

    def overrides(self, args: dict[str, Any]) -> dict[str, Any]:
        """The Trainer's arguments `args`, changed as the doctor needs."""
        args = dict(args)
        if args.get("profiler") is None:
            args["profiler"] = "simple"
        given = args.get("callbacks")
        given = [] if given is None else list(given) if isinstance(given, list | tuple) else [given]
        args["callbacks"] = [*given, StopAfterSteps(self.steps)]
        args["min_steps"] = args["min_epochs"] = None  # the stop is not held back by a minimum
        args["num_sanity_val_steps"] = 0
        if args.get("limit_val_batches") in (None, 1.0):  # None: Lightning's default, all of them
            args["limit_val_batches"] = 5
        return args

    def variables(self) -> dict[str, str]:
        """What a process started for the doctor is given (read back by `from_variables`)."""
        return {DOCTOR_ENV: str(self.steps)}

    @classmethod
    def from_variables(cls, env: Mapping[str, str]) -> DoctorRun | None:
        value = env.get(DOCTOR_ENV)
        if not value:
            return None
        return cls(int(value) if value.isdigit() and int(value) > 1 else 100)


class StopAfterSteps(Callback):
    """Asks the fit to stop once `steps` optimizer steps are done: the stop an early-stopping callback
    makes, after which the fit validates (when it has validation) and ends as usual."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def on_train_batch_end(self, trainer: Trainer, *args: Any) -> None:
        if trainer.global_step >= self.steps:
            trainer.should_stop = True


# The doctor run this process is part of: read once, when surge is first imported in a process that
# `surge doctor` started (or one of its ranks); `doctor_run` sets it in-process.
_requested: DoctorRun | None = DoctorRun.from_variables(os.environ)


def requested() -> DoctorRun | None:
    """The doctor run every Trainer built now belongs to, if any (`Trainer.__init__` asks)."""
    return _requested


@contextlib.contextmanager
def doctor_run(run: DoctorRun) -> Iterator[DoctorRun]:
    """Every Trainer built inside the block profiles a short fit as `surge doctor` would."""
    global _requested
    before, _requested = _requested, run
    try:
        yield run
    finally:
        _requested = before
