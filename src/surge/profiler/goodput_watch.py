"""The goodput ledger's view of a fit: its hooks mark set-up, validation, training and teardown,
torch's compile events mark compilation, a heartbeat file records how long the run lived, and the
fit's end says it in one line (or the table, or nothing: `Trainer(goodput_report=)`) and logs it.

Only fit-level hooks are overridden here (none per batch): the loop calls nothing more per step.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..callbacks.base import Callback
from ..config.run_records import heartbeat_file
from ..config.semantics import SURGE, Semantics
from ..config.ticker import TICKER, Job
from ..rank_zero import info, warn
from ..safe_files import write_replacing
from ..speed.compiling import compile_events
from .goodput import REPORTS, GoodputLedger, say

__all__ = ["GoodputLedger", "GoodputWatch"]

if TYPE_CHECKING:
    from ..module import Module
    from ..trainer import Trainer

HEARTBEAT_S = 1.0  # how often the run's sign of life is rewritten (its redone work is known to this)


class Heartbeat:
    """Rewrites `path` from the process's ticker thread every `HEARTBEAT_S`: the job, the run, the time and
    the status ("running"; "finished" or "failed" at the end). Atomic (a rename), not fsynced: a
    power cut may lose the last second, a killed process loses nothing written."""

    def __init__(self, path: Path, ledger: GoodputLedger) -> None:
        self.path, self.ledger = path, ledger
        self._beating: Job | None = None
        self._said = False  # a write failed (said once)

    def start(self) -> None:
        self._write("running")
        self._beating = TICKER.every(HEARTBEAT_S, self._beat)

    def stop(self, status: str) -> None:
        if self._beating is not None:
            self._beating.cancel()  # (a beat under way finishes first: the status is written last)
            self._beating = None
        self._write(status)

    def _beat(self) -> None:
        self._write("running")

    def _write(self, status: str) -> None:
        record = {"job": self.ledger.job, "run": self.ledger.run, "time": time.time(), "status": status}
        try:
            write_replacing(self.path, json.dumps(record).encode())
        except OSError as err:  # a run directory that vanished or filled: no heartbeat, nothing else lost
            if not self._said:
                self._said = True
                info(f"goodput: the heartbeat {self.path} cannot be written ({err}); a resumed run will count "
                     "this run's time after its last checkpoint as downtime")  # fmt: skip


class GoodputWatch(Callback):
    """Marks the fit's phases in `ledger`; at fit end waits for background checkpoint writes (as a
    checkpoint stall), then reports it (`report`: "line", "table" or "off") and logs it to every logger."""

    def __init__(
        self, ledger: GoodputLedger, report: str | None = None, semantics: Semantics = SURGE
    ) -> None:
        self.ledger = ledger
        self.report = report_at_fit_end(report, semantics)
        self.in_loggers = semantics.goodput_in_loggers  # the mode: the loggers' files stay Lightning's
        self.heartbeat: Heartbeat | None = None
        self._compiling = False
        self._unwatch: Callable[[], None] | None = None

    def on_fit_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._unwatch = compile_events(self._compile_start, self._compile_end, import_dynamo=False)

    def _compile_start(self, *_: Any) -> None:
        self._compiling = True
        self.ledger.enter("compile")

    def _compile_end(self, *_: Any) -> None:
        if self._compiling:
            self._compiling = False
            self.ledger.leave()

    def on_sanity_check_start(self, trainer: Trainer, pl_module: Module) -> None:
        self.ledger.enter("validation")

    def on_sanity_check_end(self, trainer: Trainer, pl_module: Module) -> None:
        self.ledger.leave()

    def on_validation_start(self, trainer: Trainer, pl_module: Module) -> None:
        self.ledger.enter("validation")

    def on_validation_end(self, trainer: Trainer, pl_module: Module) -> None:
        self.ledger.leave()

    def on_train_start(self, trainer: Trainer, pl_module: Module) -> None:
        loop = trainer.fit_loop
        self.ledger.watch_data(lambda: loop.data_wait_s)
        saves = trainer.checkpoint_callback is not None and not trainer.fast_dev_run
        writes_files = bool(trainer.loggers) or saves
        path = _heartbeat_path(trainer, self.in_loggers) if trainer.is_global_zero and writes_files else None
        if path is not None:  # (a run that writes no files gets none of its own)
            self.heartbeat = Heartbeat(path, self.ledger)
            self.ledger.beats_into(path)
            self.heartbeat.start()
        self.ledger.move("train")

    def on_train_end(self, trainer: Trainer, pl_module: Module) -> None:
        self.ledger.move("teardown")

    def on_fit_end(self, trainer: Trainer, pl_module: Module) -> None:
        if trainer.strategy.checkpoint_writer.asynchronous:  # (no background writes: nothing to book)
            with self.ledger.timed("checkpoint_async"):
                trainer.strategy.finish_checkpoints()  # what it would wait for right after: counted now
        self._end("finished")
        goodput = trainer.goodput
        if goodput is None or not trainer.is_global_zero:
            return
        say(goodput, self.report)
        if self.in_loggers:
            for logger in trainer.loggers:
                logger.log_metrics(goodput.metrics(), trainer.global_step)

    def on_exception(self, trainer: Trainer, pl_module: Module, exception: BaseException) -> None:
        self._end("failed")

    def _end(self, status: str) -> None:
        if self.ledger.flops is not None:  # a first step that never reached its backward
            self.ledger.flops.close()
        self.ledger.stop()
        if self.heartbeat is not None:
            self.heartbeat.stop(status)
            self.heartbeat = None
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None


def report_at_fit_end(given: str | None, semantics: Semantics = SURGE) -> str:
    """`Trainer(goodput_report=)`: None is one line in surge's API; under `surge run` nothing (Lightning
    prints no such thing) unless `SURGE_GOODPUT=line|table` asks for it."""
    if given is not None:
        return given
    if semantics.goodput_report == "line":
        return "line"
    asked = os.environ.get("SURGE_GOODPUT", "off")
    if asked not in REPORTS:
        warn(f"SURGE_GOODPUT={asked!r} is not one of {REPORTS}: the goodput report stays off")
        return "off"
    return asked


def _heartbeat_path(trainer: Trainer, in_loggers: bool) -> Path | None:
    """In the run's log folder in surge's own API with a logger; else in surge's folder for it
    (config/run_records.py): the Lightning mode's folders hold exactly Lightning's files."""
    own = bool(trainer.loggers) and in_loggers
    try:
        path = heartbeat_file(trainer.log_dir, own)
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:  # no heartbeat then (a resumed run says so); nothing else is lost
        return None
    return path
