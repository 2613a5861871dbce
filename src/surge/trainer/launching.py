"""A stage whose ranks are started from inside it (`DDPStrategy(start_method="spawn"|"fork"|
"forkserver")`): what a Trainer sends to them, and what comes back to the main process.

As Lightning's spawn-based strategies: the main process takes no rank; after the stage it has rank
zero's trained weights (fit only), `trainer.state`, the stage's return value, `callback_metrics`
(merged into its own) and the checkpoint callback's `best_model_path`. Loop counters
(`global_step`, `current_epoch`), optimizers, logged and progress-bar metrics and the rest of the
callbacks' state stay as they were in the main process. A second `fit()` is refused."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

import torch

from ..errors import SurgeError
from ..launch.environment import ClusterEnvironment
from ..launch.main_guard import check_not_importing
from .properties import TrainerProperties


class FitAgainError(SurgeError, NotImplementedError):
    """A second `fit()` on a Trainer whose ranks are started for each stage."""


@dataclass(frozen=True)
class StageOutcome:
    """What rank zero sends back to the main process after a stage."""

    result: Any
    run_status: str
    fn: str | None
    callback_metrics: dict[str, torch.Tensor]
    best_model_path: str | None
    weights: dict[str, torch.Tensor] | None  # fit's only, as Lightning


@dataclass(frozen=True)
class StageJob:
    """One stage, run as a rank in each started process (`MultiprocessingLauncher`'s job). Bound
    methods of the Trainer: they pickle with it."""

    body: Callable[..., Any]  # the Trainer's stage body: `_fit`, `_evaluate`, `_predict`
    args: tuple[Any, ...]
    as_rank: Callable[[ClusterEnvironment, Callable[..., Any], tuple[Any, ...]], StageOutcome | None]
    taker: Callable[[StageOutcome], Any]
    strategy: Any

    def parts(self) -> list[tuple[str, Any]]:
        """What is sent, by the names the user knows (the stage's arguments, then the Trainer)."""
        names = inspect.signature(self.body).parameters
        return [*zip(names, self.args), ("the Trainer", getattr(self.body, "__self__", None))]

    def run_rank(self, env: ClusterEnvironment) -> StageOutcome | None:
        return self.as_rank(env, self.body, self.args)

    def failure_time(self) -> float | None:
        return getattr(self.strategy, "failed_at", None)

    def take(self, outcome: StageOutcome) -> Any:
        return self.taker(outcome)


class StageLaunching(TrainerProperties):
    """Runs a stage's body here, or in the ranks the strategy's stage launcher starts."""

    _compiled: WeakKeyDictionary[Any, Any]
    _launched_fit = False

    def __getstate__(self) -> dict[str, Any]:
        # What spawn sends a rank: compiled calls belong to this process (and hold weak references).
        return {**self.__dict__, "_compiled": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _compiled=WeakKeyDictionary())

    def _in_this_process(self, stage: str) -> bool:
        """Whether `stage` runs in this process, no stage launcher starting ranks for it."""
        check_not_importing(stage)  # a spawned process imports a script that has no __main__ guard
        return self._strategy.stage_launcher is None

    def _launched(self, stage: str, model: Any, method: str, *args: Any) -> Any:
        """`getattr(self, method)(*args)` here, or in each rank the stage launcher starts."""
        check_not_importing(stage)  # a spawned process imports a script that has no __main__ guard
        launcher = self._strategy.stage_launcher
        if launcher is None:
            return getattr(self, method)(*args)
        if stage == "fit" and self._launched_fit:
            raise FitAgainError(
                "fit() a second time on a Trainer whose strategy starts its ranks from inside fit() (spawn, fork, "
                "forkserver) is not supported: create a new Trainer and pass fit(ckpt_path=...) to continue."
            )
        self._module = model if model is not None else self._module
        self._fn = self._run_status = stage
        try:
            job = StageJob(getattr(self, method), args, self._run_as_rank, self._take_outcome, self._strategy)
            result = launcher.launch(job, stage)
        except BaseException as err:
            self._run_status = "interrupted" if isinstance(err, KeyboardInterrupt) else "failed"
            raise
        self._launched_fit |= stage == "fit"
        return result

    def _run_as_rank(
        self, env: ClusterEnvironment, body: Callable[..., Any], args: tuple[Any, ...]
    ) -> StageOutcome | None:
        """In a started process: run the stage as rank `env.global_rank`, end the process group."""
        strategy = self._strategy
        strategy.become_rank(env)  # type: ignore[attr-defined]
        outcome = self._stage_outcome(body(*args))  # on every rank: a state dict may gather (torchmetrics)
        strategy.teardown()
        return outcome if env.global_rank == 0 else None

    def _stage_outcome(self, result: Any) -> StageOutcome:
        module, callback = self._module, self.checkpoint_callback
        weights = module.state_dict() if self._fn == "fit" and module is not None else None
        best = getattr(callback, "best_model_path", None) if callback is not None else None
        metrics = {
            k: v.detach().cpu() if isinstance(v, torch.Tensor) else v
            for k, v in self.callback_metrics.items()
        }
        return StageOutcome(result, self._run_status, self._fn, metrics, best, weights)

    def _take_outcome(self, outcome: StageOutcome) -> Any:
        if outcome.weights is not None and self._module is not None:
            # Not strict, as Lightning: the ranks may have changed the module's composition.
            self._module.load_state_dict(outcome.weights, strict=False)
        self._run_status, self._fn = outcome.run_status, outcome.fn
        self._publisher.callback_metrics.update(outcome.callback_metrics)
        callback = self.checkpoint_callback
        if (
            callback is not None
            and hasattr(callback, "best_model_path")
            and outcome.best_model_path is not None
        ):
            callback.best_model_path = str(outcome.best_model_path)
        return outcome.result
