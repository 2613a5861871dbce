"""`TensorBoardLogger`: scalars and hyper-parameters as TensorBoard event files (rank zero writes).

The tensorboard package is imported when the first event is written, not by `import surge`.
Scalars are handed to the `SummaryWriter` in batches: at the first log point, then at the first log
point `flush_secs` after the last batch, at each checkpoint, at each epoch's end and at the end.
Each keeps the wall time it was logged at. The writer's thread writes a batch while the training
thread waits for it (a `flush`). One scalar at a time, that thread's file writes (an open, a write
and a close per scalar) each took the interpreter's lock back from the training step: 8,005 lock
hand-overs in 5,000 steps of a small model's default fit, 950 now (benchmarks/README.md, "The hot
loop, fifth pass"). A logged tensor's number is taken when it is logged, as Lightning does. What is
still pending when the interpreter exits (logged after a fit's end, or with no Trainer) is written
then.

Event files are only appended to. When the disk refuses a write, the logger warns once, keeps the
scalars in memory and writes them to a new event file when writing works again; training goes on.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import time
import weakref
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ..errors import SurgeRuntimeError, bad_value
from ..module.hparams import plain
from ..rank_zero import warn
from .base import PLAIN_NUMBERS, Logger, RunDir, no_prefix, read_now
from .files import WriteFailures, hparams_yaml, write_atomic
from .run_name import DEFAULT_NAME, run_name

RETRY_EVERY = 100
HAND_OVER_AT = 10_000  # pending scalars that are handed over even before `flush_secs` has passed
WRITER_ARGS = {
    "comment",
    "max_queue",
    "filename_suffix",
}  # Lightning passes **kwargs on to SummaryWriter  # scalars kept while writing fails, between two attempts
_LOGGERS: weakref.WeakSet[TensorBoardLogger] = weakref.WeakSet()  # whose pending scalars the exit writes


class TensorBoardLogger(Logger):
    """Writes to `save_dir/name/version_N/` (the same layout as `CSVLogger`), viewable with
    `tensorboard --logdir save_dir`, with Lightning's `hparams.yaml` beside them. `log_graph=True` records the module's graph once at fit start,
    traced from the module's `example_input_array`. Lightning's `default_hp_metric` is accepted
    (surge writes no `hp_metric` placeholder either way); `prefix` must be empty, `sub_dir` None;
    `**kwargs` go to `SummaryWriter` (`comment`, `max_queue`, `filename_suffix`)."""

    def __init__(
        self,
        save_dir: str | Path = ".",
        name: str | None = DEFAULT_NAME,
        version: int | str | None = None,
        log_graph: bool = False,
        flush_secs: int = 30,
        default_hp_metric: bool = True,
        prefix: str = "",
        sub_dir: str | Path | None = None,
        **kwargs: Any,
    ) -> None:
        no_prefix("TensorBoardLogger", prefix)  # Lightning's arguments, as far as surge has them
        if sub_dir is not None:
            raise bad_value(
                "TensorBoardLogger(sub_dir)", sub_dir, "None (surge writes into version_N itself)"
            )
        if isinstance(flush_secs, bool) or not isinstance(flush_secs, int | float) or not flush_secs >= 0:
            raise bad_value(
                "TensorBoardLogger(flush_secs)",
                flush_secs,
                "seconds >= 0 (0: each log point's scalars at once)",
            )
        if not isinstance(default_hp_metric, bool):
            raise bad_value("TensorBoardLogger(default_hp_metric)", default_hp_metric, "True or False")
        unknown = set(kwargs) - WRITER_ARGS
        if unknown:
            raise bad_value(
                "TensorBoardLogger(**kwargs)", sorted(unknown),
                f"arguments of SummaryWriter other than those surge sets itself: {sorted(WRITER_ARGS)}",
            )  # fmt: skip
        self._writer_kwargs = kwargs
        self._run = RunDir(save_dir, run_name(name), version)
        self._writer: Any = None
        self._log_graph = log_graph  # Lightning's attribute: a script may set it after construction
        self._flush_secs = flush_secs
        # (tag, value, step, wall time): scalars not yet handed to a writer
        self._pending: deque[tuple[str, float, int, float]] = deque()
        self._hand_at = 0.0  # time.time() from which a log point hands the pending scalars over
        self._hparams: dict[str, Any] | None = None
        self._hparams_file: dict[str, Any] = {}  # what hparams.yaml holds, written once as Lightning's
        self._retry_at = 0
        self._failures = WriteFailures("TensorBoardLogger")
        self._purge_step: int | None = None  # a resumed run: TensorBoard hides the old events from here
        self._pid = os.getpid()  # a forked child's copy writes nothing at its exit
        _LOGGERS.add(self)
        atexit.unregister(_write_pending_at_exit)  # one exit hook for all loggers
        atexit.register(_write_pending_at_exit)

    @property
    def name(self) -> str:
        return self._run.name

    @property
    def log_dir(self) -> str:
        return self._run.log_dir

    @property
    def save_dir(self) -> str:
        return self._run.save_dir

    @property
    def root_dir(self) -> str:
        return self._run.root_dir

    @property
    def version(self) -> int | str | None:
        return self._run.version

    @property
    def experiment(self) -> Any:
        """The `torch.utils.tensorboard.SummaryWriter` (created on first use)."""
        if self._writer is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as err:
                raise SurgeRuntimeError(
                    "TensorBoardLogger needs the tensorboard package: pip install tensorboard"
                ) from err
            self._writer = SummaryWriter(
                log_dir=self.log_dir,
                flush_secs=self._flush_secs,
                purge_step=self._purge_step,
                **self._writer_kwargs,
            )
            self._purge_step = None  # once: a writer made again after a disk error purges nothing
        return self._writer

    def run_state(self) -> dict[str, Any] | None:
        """The run a checkpoint names; what was logged before the checkpoint is written first (a
        resume re-logs only the steps after it)."""
        if self._pending and not self._failures.failing:
            self._hand_over(time.time())
        return self._run.run_state()

    def resume_run(self, state: Mapping[str, Any], step: int) -> None:
        if "version" in state and self._run.adopt(state["version"], "TensorBoardLogger"):
            self._purge_step = step

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        now, pending = time.time(), self._pending
        for k, v in metrics.items():  # (a loop, no calls for the trainer's floats: a log point's cost)
            if k != "epoch":
                pending.append((k, v if v.__class__ in PLAIN_NUMBERS else _number(k, v), step, now))
        if "epoch" in metrics:
            epoch = metrics["epoch"]
            pending.append(
                ("epoch", epoch if epoch.__class__ in PLAIN_NUMBERS else _number("epoch", epoch), step, now)
            )
        if self._failures.failing:
            if len(pending) >= self._retry_at:
                self._write()
        elif now >= self._hand_at or len(pending) >= HAND_OVER_AT:
            self._hand_over(now)

    def _hand_over(self, now: float) -> None:
        """The pending scalars to the writer, written before this returns (see the module's doc)."""
        self._hand_at = now + self._flush_secs
        if self._write():
            try:
                self._writer.flush()
            except OSError as err:
                self._lost(err)

    def _at_exit(self) -> None:
        """The interpreter exits: what is still pending goes to the event file (this process's only)."""
        if self._pending and self._pid == os.getpid():
            self._hand_over(time.time())

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        self._hparams_file.update(params)
        self._hparams = {
            k: v if isinstance(v, int | float | str | bool) else str(v)
            for k, v in plain(dict(params)).items()
        }
        self._write()

    def log_graph(self, model: Any, input_array: Any = None) -> None:
        """With `log_graph=True` (or `_log_graph` set later): the model's graph, traced from
        `input_array` (default: its `example_input_array`); without one, a warning, as Lightning's."""
        if not self._log_graph:
            return
        example = getattr(model, "example_input_array", None) if input_array is None else input_array
        if example is None or not isinstance(example, torch.Tensor | tuple):
            what = (
                "is not set" if example is None else f"is a {type(example).__name__}, not a tensor or a tuple"
            )
            warn(
                f"TensorBoardLogger(log_graph=True) could not record the graph: the module's example_input_array "
                f"{what}; set it to the positional arguments of forward() (a tensor, or a tuple of them)."
            )
            return
        self.log_module_graph(model, example)

    def log_module_graph(self, module: Any, example: Any) -> None:
        """Record the module's graph from one example input (not kept if the disk refuses it)."""
        try:
            self.experiment.add_graph(module, example)
        except OSError as err:
            self._lost(err)

    def save(self) -> None:
        """Flush the event file (made now if it was not: a run that logs nothing has one, as in
        Lightning) and write `hparams.yaml` once, with the hyper-parameters logged so far."""
        if not self._write():
            return
        try:
            self.experiment.flush()
            hparams = self._run.path / "hparams.yaml"
            if not hparams.exists():
                write_atomic(hparams, hparams_yaml(self._hparams_file))
        except OSError as err:
            self._lost(err)
            return
        self._failures.recovered(self._run.where)

    def finalize(self, status: str) -> None:
        self.save()
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.close()
            except OSError as err:
                self._lost(err)
        if self._pending or self._hparams is not None:
            warn(
                f"TensorBoardLogger could not write {len(self._pending)} scalars"
                f"{' and the hyper-parameters' if self._hparams is not None else ''} to {self._run.where} "
                f"at the end of the run ({self._failures.error}); they are lost."
            )

    def _write(self) -> bool:
        """Hand what is pending to the writer; False (the writer dropped) when the disk refused."""
        if not self._pending and self._hparams is None:
            return True
        try:
            writer = self.experiment
            if self._hparams is not None:
                writer.add_hparams(self._hparams, {}, run_name=".")
                self._hparams = None
            while self._pending:
                tag, value, step, wall = self._pending[0]
                writer.add_scalar(tag, value, global_step=step, walltime=wall)
                self._pending.popleft()
        except OSError as err:
            self._lost(err)
            return False
        return True

    def _lost(self, err: OSError) -> None:
        """A write failed: warn (once), and drop the writer, whose event file may end in a torn record."""
        kept = "scalars from now on are kept in memory and written to a new event file when it can"
        self._failures.failed(self._run.where, err, kept)
        self._retry_at = len(self._pending) + RETRY_EVERY
        writer, self._writer = self._writer, None
        if writer is not None:
            with contextlib.suppress(OSError):
                writer.close()
        self._remove_empty_event_files()

    def _remove_empty_event_files(self) -> None:
        """Event files of this process that a failed writer left empty."""
        pid = str(os.getpid())
        for path in self._run.where.glob("events.out.tfevents.*"):
            with contextlib.suppress(OSError):
                if path.name.split(".")[-2] == pid and path.stat().st_size == 0:
                    path.unlink()


def _number(key: str, value: Any) -> float | int:
    """A value kept for a later hand-over, read now (`read_now`); what is not a number is refused
    here, not at a hand-over far from the call that logged it."""
    try:
        number = read_now(value)
    except (RuntimeError, ValueError):  # a tensor or array of more than one element
        number = None
    if not isinstance(number, int | float):
        raise bad_value(
            f"TensorBoardLogger.log_metrics({key!r})", value,
            "a number or a one-element tensor (surge writes no add_scalars group: log each as its own key)",
        )  # fmt: skip
    return number


def _write_pending_at_exit() -> None:
    """At the interpreter's exit, each live logger's pending scalars to its event file."""
    for logger in list(_LOGGERS):
        logger._at_exit()
