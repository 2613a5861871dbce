"""Where host metrics go once read: `callback_metrics`, the progress bar, and the loggers."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ..config.semantics import SURGE, Semantics
from ..data import move_to_device
from ..errors import SurgeRuntimeError
from ..loggers.base import Logger
from ..module import Module
from ..module.hparams import logged_hparams
from .results import Results, to_floats

if TYPE_CHECKING:
    from ..datamodule import DataModule

Flags = Mapping[str, tuple[bool, bool, str]]  # key -> (prog_bar, logger, name without its _step/_epoch)
_LOADER_SUFFIX = re.compile(r"/dataloader_idx_\d+$")


def _epoch_key(key: str, name: str) -> bool:
    """Whether `key` is the `name_epoch` form of `name` (a loader's suffix after both)."""
    suffix = match.group() if (match := _LOADER_SUFFIX.search(name)) else ""
    return key == f"{name.removesuffix(suffix)}_epoch{suffix}"


class MetricsPublisher:
    """Routes metrics already read to the host. Owns the three dicts the Trainer shows as
    `callback_metrics`, `logged_metrics` and `progress_bar_metrics`; only rank zero writes to loggers.

    As in Lightning, each stage starts them empty (`reset_metrics`), and while a training epoch runs
    `callback_metrics` and `logged_metrics` show its latest step values when read (`follow`): as
    device tensors, so reading the dicts costs no host read (converting a value does);
    `progress_bar_metrics` holds floats, so reading it then is one host read. An evaluation's
    latest step values (`name_step`) show in `logged_metrics` and `progress_bar_metrics` as each
    batch ends (`follow_evaluation`) and stay after (`keep_eval_steps`), never in
    `callback_metrics`, as in Lightning."""

    def __init__(
        self,
        loggers: Sequence[Logger],
        is_global_zero: Callable[[], bool],
        epoch: Callable[[], int],
        semantics: Semantics = SURGE,
    ) -> None:
        self.loggers, self.is_global_zero, self.epoch = list(loggers), is_global_zero, epoch
        self._callback: dict[str, torch.Tensor] = {}
        self._live: Results | None = None  # the training epoch whose step values show
        self._live_shown = False  # its step values were put in the dicts (`_live_keys_first`)
        # the evaluation loader whose latest step values show, and the name each shows under
        self._live_eval: tuple[Results, Callable[[str], str]] | None = None
        self._logged: dict[str, torch.Tensor] = {}
        self._progress_bar: dict[str, float] = {}
        self._last_step = -1
        self._at_last_step: list[dict[str, float]] = []  # the rows the loggers were given at the latest step
        self._replayed: set[str] = set()  # after a resume: names the loggers hold at its step already
        self._held: HeldRow | None = None  # a training row written once its batch's end hooks have run
        # Lightning's loggers get, for what training logs, the batches stepped before the batch
        # that logged (global_step - 1 once it stepped); surge's own API gives global_step.
        self.train_step_offset = semantics.logger_step_offset

    @property
    def callback_metrics(self) -> dict[str, torch.Tensor]:
        """The metrics callbacks read (Lightning's keys): epoch values under `name` and `name_epoch`,
        training step values under `name` and `name_step`; evaluation step values never."""
        if self._live is not None:
            self._callback.update(self._live.step_tensors())
        return self._callback

    @property
    def logged_metrics(self) -> dict[str, torch.Tensor]:
        """What the loggers were given, with the training epoch's latest step values (Lightning's
        keys: `name_step` where the name is logged per epoch too)."""
        if self._live is not None:
            self._logged.update(self._live.step_values())
        if self._live_eval is not None:
            results, key = self._live_eval
            self._logged.update({key(k): v for k, v in results.step_values().items()})
        return self._logged

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        """The `prog_bar=True` values as floats (while a training epoch runs, read now: a host read)."""
        if self._live is not None:
            self._progress_bar.update(to_floats(self._live.step_values(prog_bar=True)))
        if self._live_eval is not None:
            results, key = self._live_eval
            shown = to_floats(results.step_values(prog_bar=True))
            self._progress_bar.update({key(k): v for k, v in shown.items()})
        return self._progress_bar

    def published_progress_bar(self) -> dict[str, float]:
        """The `prog_bar=True` values published so far (no host read)."""
        return self._progress_bar

    def follow(self, results: Results | None) -> None:
        """Show `results`' step values in `callback_metrics` and `logged_metrics` when read (None:
        the epoch has ended)."""
        if results is None and self._live is not None:
            self._callback.update(self._live.step_tensors())
            self._logged.update(self._live.step_values())
        self._live, self._live_shown = results, False

    def _live_keys_first(self) -> None:
        """Before the first value published while a training epoch runs (its validation, its end):
        the epoch's step values so far, so the keys keep Lightning's order (training's first, as it
        publishes them at each batch). Once an epoch; the progress bar's values are a host read."""
        if self._live is None or self._live_shown:
            return
        self._live_shown = True
        self._callback.update(self._live.step_tensors())
        self._logged.update(self._live.step_values())
        self._progress_bar.update(to_floats(self._live.step_values(prog_bar=True)))

    def in_training_epoch(self) -> bool:
        """Whether a training epoch runs (its step values followed): a validation is inside a fit's."""
        return self._live is not None

    def follow_evaluation(self, results: Results | None, key: Callable[[str], str] = str) -> None:
        """Show an evaluation loader's latest step values in `logged_metrics` and
        `progress_bar_metrics` when read (under `key(name)`), so a batch's end hooks see that
        batch's, as in Lightning; None: the loader has ended (`keep_eval_steps` keeps them)."""
        self._live_eval = None if results is None else (results, key)

    def show_synced_steps(self, step: int) -> None:
        """Before a validation inside a training epoch (every rank): the epoch's latest step values
        logged with `sync_dist` on several processes, reduced now (a collective and a host read), in
        `callback_metrics` and `logged_metrics`, as Lightning reduces them at every step."""
        if self._live is not None and self._live.syncs_step_values():
            self.publish(self._live.read_step(), self._live.flags(), step=step, to_loggers=False)

    def keep_eval_steps(
        self, logged: Mapping[str, torch.Tensor], prog_bar: Mapping[str, torch.Tensor]
    ) -> None:
        """An evaluation loader's latest step values (`on_step=True` in an evaluation hook) for
        `logged_metrics` and `progress_bar_metrics` (one host read, at the loader's end)."""
        self._live_keys_first()
        self._logged.update(logged)
        if prog_bar:
            self._progress_bar.update(to_floats(prog_bar))

    def reset_metrics(self) -> None:
        """A stage starts: nothing logged before it shows (Lightning resets at each stage)."""
        self._callback, self._live, self._live_eval, self._held = {}, None, None, None
        self._logged, self._progress_bar = {}, {}

    def publish(
        self,
        metrics: Mapping[str, float],
        flags: Flags,
        step: int,
        evaluation: bool = False,
        to_loggers: bool = True,
        epoch: bool = True,
    ) -> None:
        """Make `metrics` visible; `evaluation` results keep a training metric's plain name. The
        loggers get one row: with an `epoch` value when `epoch` (what the loops log; what a callback
        logs at a step of its choosing has none, as in Lightning), at `step` unless a metric named
        "step" gives it."""
        self._live_keys_first()
        logged = {}
        for key, value in metrics.items():
            prog_bar, to_logger, name = flags.get(key, (False, True, key))
            tensor = torch.tensor(value)
            if name != key and (_epoch_key(key, name) or name not in self._callback or not evaluation):
                self._callback[name] = tensor  # first, as Lightning orders them: `val_loss`, `val_loss_epoch`
            self._callback[key] = tensor
            if prog_bar:
                self._progress_bar[key] = value
            if to_logger:
                logged[key] = value
        if logged:  # Lightning's `logged_metrics`: every logger=True value, sent or not
            self._logged.update({k: torch.tensor(v) for k, v in logged.items()})
            if to_loggers:
                self._to_loggers(logged, step, epoch)

    def hold_row(self, results: Results, metrics: Mapping[str, float], flags: Flags, step: int) -> None:
        """A log interval's batch has end hooks: its row (`metrics`, read and published to the dicts)
        reaches the loggers after them, with what they log (Lightning's order; `take_row`). A
        checkpoint saved in between carries it (`runs_state`)."""
        self._held = HeldRow(results, metrics, flags, step, results.step_marks())

    def take_row(self) -> tuple[Mapping[str, float], Flags, int]:
        """The held row for the loggers, read again (a host read) only if an end hook logged a step
        value since; nothing is held after."""
        held, self._held = self._held, None
        if held is None:
            raise SurgeRuntimeError("MetricsPublisher.take_row: no row is held (hold_row first)")
        metrics, flags = held.now()
        return metrics, flags, held.step

    def drop_row(self) -> None:
        """The held row's batch did not end (a hook raised): nothing of it is written or carried."""
        self._held = None

    def publish_from_callback(self, metrics: Mapping[str, float], step: int, callback_metrics: bool) -> None:
        """Values a callback computed on the host, as Lightning's callbacks log them: to the loggers
        in a row without an epoch value, and to `callback_metrics` if asked (`LearningRateMonitor`
        does, `DeviceStatsMonitor` not); never to `logged_metrics`, which hold what `self.log` logged."""
        if callback_metrics:
            self._callback.update({k: torch.tensor(v) for k, v in metrics.items()})
        if metrics:
            self._to_loggers(dict(metrics), step, epoch=False)

    def _to_loggers(self, logged: dict[str, float], step: int, epoch: bool) -> None:
        """Write a row to the loggers (rank zero), less what a resume gave them already."""
        if self._replayed:
            logged = self._not_replayed(logged, step)
        if logged and self.loggers and self.is_global_zero():
            self._log_row(dict(logged), step, epoch)

    def log_evaluation_step(self, metrics: Mapping[str, float], flags: Flags, step: int) -> None:
        """An evaluation batch's step values: to `logged_metrics` and, at `step` (the batch's number
        in its loader) with no epoch, to the loggers; never to `callback_metrics` (as Lightning)."""
        logged = {k: v for k, v in metrics.items() if flags.get(k, (False, True, k))[1]}
        self._live_keys_first()
        if logged:
            self._logged.update({k: torch.tensor(v) for k, v in logged.items()})
            if self.loggers and self.is_global_zero():
                self._log_row(logged, step, epoch=False, remember=False)

    def _log_row(self, row: dict[str, float], step: int, epoch: bool, remember: bool = True) -> None:
        """One row to every logger (rank zero): a logged "step" is its step, as in Lightning.
        `remember`: a training row, kept for the checkpoint at its step (evaluation's steps are
        another count)."""
        row, step = self._row(row, step, epoch)
        if remember:
            if step != self._last_step:
                self._last_step, self._at_last_step = step, []
            self._at_last_step.append(row)
        for lg in self.loggers:
            lg.log_metrics(row, step)

    def _row(self, row: dict[str, float], step: int, epoch: bool) -> tuple[dict[str, float], int]:
        """A row as the loggers get it, and its step: a logged "step" is its step; else, where the
        loop logs it, the epoch's number in it."""
        if "step" in row:
            step = int(row.pop("step"))
        elif epoch:
            row.setdefault("epoch", self.epoch())
        return row, step

    def log_run_start(
        self, module: Module, hparams: bool = True, datamodule: DataModule | None = None
    ) -> None:
        """The module's and the datamodule's hyper-parameters, merged (`logged_hparams`; unless
        `hparams` is False, Lightning's `enable_autolog_hparams`, or they were saved with
        `logger=False`), and the module's graph where a logger asks for it (rank zero)."""
        if not (self.loggers and self.is_global_zero()):
            return
        example = getattr(module, "example_input_array", None)
        values = logged_hparams(module, datamodule) if hparams else {}
        for lg in self.loggers:
            if values:
                lg.log_hyperparams(values)
            lg.log_graph(module, None if example is None else move_to_device(example, module.device))
            lg.save()  # as Lightning: a TensorBoard run has its event file and hparams.yaml from the start

    def runs_state(self) -> dict[str, Any]:
        """The checkpoint's "loggers" entry: each logger's run, and what they were given at the
        latest step (a resume from this step gives it again: the loggers replace that step)."""
        if not self.is_global_zero():  # the loggers' runs are rank zero's
            return {"runs": [], "step": -1, "rows": []}
        runs = [{"class": type(lg).__name__, "run": lg.run_state()} for lg in self.loggers]
        step, rows = self._last_step, list(self._at_last_step)
        if self._held is not None:  # saved by a batch-end hook: the row its batch will write
            metrics, flags = self._held.now(alone=True)
            logged = {k: v for k, v in metrics.items() if flags.get(k, (False, True, k))[1]}
            row, at = self._row(logged, self._held.step, epoch=True)
            step, rows = at, [*(rows if at == step else []), row]
        return {"runs": runs, "step": step, "rows": rows}

    def continue_runs(self, ckpt: Mapping[str, Any]) -> None:
        """Point each logger at the run a checkpoint names (by class, in order) before the run
        directory is chosen (rank zero); a checkpoint without the entry changes nothing."""
        saved = ckpt.get("loggers")
        if not (isinstance(saved, dict) and self.loggers and self.is_global_zero()):
            return
        step = int(ckpt.get("global_step", 0)) - self.train_step_offset  # the step its loggers got
        runs = [e for e in saved.get("runs", []) if isinstance(e, dict) and e.get("run")]
        resumed = []
        for lg in self.loggers:  # each takes the first run saved by a logger of its class
            entry = next((e for e in runs if e.get("class") == type(lg).__name__), None)
            if entry is not None:
                runs.remove(entry)
                lg.resume_run(entry["run"], step)
                resumed.append(lg)
        rows = list(saved.get("rows") or []) if saved.get("step") == step else []
        for row in rows:
            for lg in resumed:
                lg.log_metrics(row, step)
        self._last_step, self._at_last_step = step, rows
        self._replayed = {k for row in rows for k in row if k != "epoch"}

    def _not_replayed(self, logged: dict[str, float], step: int) -> dict[str, float]:
        """A resumed fit logs some of its checkpoint step's metrics again (a validation that ran
        before the save runs again): the loggers have them, from the checkpoint."""
        if step != self._last_step:
            self._replayed = set()
            return logged
        return {k: v for k, v in logged.items() if k not in self._replayed}

    def finalize_loggers(self, status: str) -> None:
        """Close the loggers with the stage's outcome ("success", "failed", "interrupted"; rank zero)."""
        if self.is_global_zero():
            for lg in self.loggers:
                lg.finalize(status)

    def save_loggers(self) -> None:
        """Flush the loggers' buffered rows (rank zero)."""
        if self.is_global_zero():
            for lg in self.loggers:
                lg.save()


@dataclass(frozen=True, eq=False)
class HeldRow:
    """A training row waiting for its batch's end hooks: the values read at the log interval, and
    the step values' marks then (`Results.step_marks`), to read only what a hook logs since."""

    results: Results
    metrics: Mapping[str, float]
    flags: Flags
    step: int
    marks: Mapping[int, Any]

    def now(self, alone: bool = False) -> tuple[Mapping[str, float], Flags]:
        """The row's values and flags as they stand: those a hook logged since are read (a host
        read, each rank its own: a hook may log on one rank only), the others kept. `alone` (rank
        zero saving a checkpoint): no collective, so a `sync_dist` value logged since is left out,
        its reduced value not known yet."""
        if alone:
            logged, unknown = self.results.read_own_since(self.marks)
        else:
            logged, unknown = self.results.read_step(since=self.marks), set()
        if not (logged or unknown):
            return self.metrics, self.flags
        kept = {k: v for k, v in self.metrics.items() if k not in unknown}
        return {**kept, **logged}, self.results.flags()
