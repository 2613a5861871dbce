"""Goodput: where the wall time of a whole training job went, across its restarts.

The ledger books every second of a fit to exactly one category (exclusive time: entering a
category pauses the one around it), with host clocks read only at points that exist anyway: the
fit's hooks, checkpoint saves, compile events and the loop's data wait (the loop's own clock pair
around `next()`). Nothing adds a device sync.

Its totals travel in every checkpoint (`checkpoint["surge"]["goodput"]`, versioned), so a resumed
run adds to the job's accounting; and a heartbeat file (`goodput.json`, where config/run_records.py
says, rewritten every second by a background thread) says how long the run lived after its last
checkpoint, which is the work a resumed run does again (`redone`). See docs/long_runs.md.
"""

from __future__ import annotations

import json
import math
import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError
from ..rank_zero import info
from ..safe_files import read_bounded
from .flops import NO_BACKWARD, StepFlops

VERSION = 1
CATEGORIES = (
    "train",  # the training steps' compute (what the loop does besides waiting for data)
    "data",  # waiting for the next batch
    "validation",  # validation inside fit and the sanity check
    "checkpoint",  # writing checkpoints at once (the whole write stalls training)
    "checkpoint_async",  # async_checkpoint=True: the snapshot, and waiting for the previous write
    "compile",  # torch.compile (dynamo and its backend), wherever it happens
    "tuning",  # tuners that decide before training (batch size search, effective_batch_size)
    "resume",  # finding, reading and restoring a checkpoint
    "redone",  # a dead run's time after its last checkpoint: trained again by the resumed run
    "downtime",  # from a dead run's last sign of life to the resumed process's start
    "startup",  # the resumed process's start: interpreter, imports, building the model
    "between_runs",  # a finished run's last checkpoint to the fit that went on from it: nothing ran
    "setup",  # fit() up to the first training batch: moving the model, the loaders, first imports
    "teardown",  # after the last training batch: the final hooks, loggers and files
    "other",  # what no category above claims (and the "other" of a checkpoint that had no setup)
)
LOST_TO_RESTARTS = ("redone", "downtime", "startup", "resume")
MAX_SECONDS = 1e9  # about 31 years: more in an entry is not a time this job took
MAX_HEARTBEAT_BYTES = 1 << 16


@dataclass(frozen=True)
class Goodput:
    """The job's accounting so far: seconds by category (they sum to `wall_s`), the runs it took,
    and, when the FLOPs of a step were counted, the achieved FLOP/s and the model FLOPs
    utilisation against the device's dense peak (`mfu`, None where the peak is unknown)."""

    seconds: Mapping[str, float]
    runs: int = 1
    steps: int = 0  # optimizer steps this run took
    flops_per_step: float | None = None
    flops_per_s: float | None = None
    peak_flops: float | None = None
    mfu: float | None = None
    device: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    run_seconds: Mapping[str, float] = field(default_factory=dict)  # this run's part of `seconds`

    @property
    def wall_s(self) -> float:
        return sum(self.seconds.values())

    @property
    def train_fraction(self) -> float:
        """The share of the job's wall time that trained the model (the goodput)."""
        wall = self.wall_s
        return self.seconds.get("train", 0.0) / wall if wall > 0 else 0.0

    @property
    def lost_to_restarts_s(self) -> float:
        return sum(self.seconds.get(c, 0.0) for c in LOST_TO_RESTARTS)

    def metrics(self) -> dict[str, float]:
        """What the loggers receive at fit end: `goodput/train_fraction`, `goodput/wall_s`,
        `goodput/<category>_s` of each category that took time, `goodput/runs`, ..."""
        out = {"goodput/train_fraction": self.train_fraction, "goodput/wall_s": self.wall_s}
        out.update(
            {f"goodput/{c}_s": float(s) for c in CATEGORIES if (s := self.seconds.get(c, 0.0)) >= 0.005}
        )
        out["goodput/runs"] = float(self.runs)
        if self.flops_per_s is not None:
            out["goodput/flops_per_s"] = self.flops_per_s
        if self.mfu is not None:
            out["goodput/mfu"] = self.mfu
        return out

    def line(self) -> str:
        """One line: the share that trained, and where most of the rest went."""
        wall = self.wall_s or 1.0
        rest = sorted(((s, c) for c, s in self.seconds.items() if c != "train" and s >= 0.005), reverse=True)
        where = ", ".join(f"{c} {s / wall:.0%}" for s, c in rest[:3])
        runs = f" over {self.runs} runs" if self.runs != 1 else ""
        return (
            f"Goodput: {self.train_fraction:.0%} of {self.wall_s:.1f} s trained{runs}"
            + (f" ({where})" if where else "")
            + '; the table: trainer.goodput.table(), or Trainer(goodput_report="table")'
        )

    def table(self) -> str:
        """One compact table: each category's seconds and share, then throughput."""
        wall = self.wall_s or 1.0
        bar = "-" * 44
        runs = f"{self.runs} run" + ("s" if self.runs != 1 else "")
        lines = [bar, f"{'Goodput':<20}{'seconds':>12}{'share':>12}", bar]
        for c in CATEGORIES:
            s = self.seconds.get(c, 0.0)
            if s >= 0.005 or c == "train":
                lines.append(f"{c:<20}{s:>12.2f}{s / wall:>12.1%}")
        lines.append(f"{'wall (' + runs + ')':<20}{self.wall_s:>12.2f}{1:>12.0%}")
        lines.append(bar)
        if self.flops_per_s is not None:
            line = f"{_si(self.flops_per_s)}FLOP/s achieved in training ({_si(self.flops_per_step or 0)}FLOPs a batch)"
            line += f"; MFU {self.mfu:.1%} of {self.device}'s dense peak" if self.mfu is not None else ""
            lines.append(line)
        lines += list(self.notes)
        return "\n".join(lines)


class GoodputLedger:
    """Exclusive-time accounting of one fit, with the job's history from a resumed checkpoint."""

    def __init__(self) -> None:
        self._reset()
        self.running = self.used = False

    def _reset(self) -> None:
        self.seconds: dict[str, float] = dict.fromkeys(CATEGORIES, 0.0)
        self.job, self.run = uuid.uuid4().hex, uuid.uuid4().hex
        self.runs = 1
        self.heartbeat_path = ""
        self.notes: list[str] = []
        self._current, self._stack, self._mark = "setup", list[str](), time.perf_counter()
        self._waited = 0.0  # the loop's data wait booked so far
        self._data_wait: Callable[[], float] = _no_wait  # the loop's data-wait counter, read at snapshots
        self.started_unix = time.time()
        self.process_start: float | None = None
        self.flops: StepFlops | None = None
        self._before: dict[str, float] = dict.fromkeys(CATEGORIES, 0.0)  # the earlier runs' seconds
        self._cached_from: str = ""  # compiled artifacts this run loaded (restarts without recompiling)
        self._served: Callable[[], int] = _none_served  # how many graphs they served so far
        self._saver_compile_s: float | None = None  # the compile seconds of the run that saved them

    # -- the clock -------------------------------------------------------------------------------
    def start(self) -> None:
        """A fit begins: a new run of its own job (a resume makes it the checkpoint's job's)."""
        self._reset()
        self.running = self.used = True
        first, _first_fit[0] = _first_fit[0], False
        self.process_start = process_start_time() if first else None  # a resumed job's startup

    def watch_data(self, waited: Callable[[], float]) -> None:
        """`waited()`: the seconds the loop has waited for batches so far (its own counter)."""
        self._data_wait, self._waited = waited, waited()

    def enter(self, category: str) -> None:
        if not self.running:
            return
        now = time.perf_counter()
        self.seconds[self._current] += now - self._mark
        self._stack.append(self._current)
        self._current, self._mark = category, now

    def leave(self) -> None:
        if not self.running or not self._stack:
            return
        now = time.perf_counter()
        self.seconds[self._current] += now - self._mark
        self._current, self._mark = self._stack.pop(), now

    def move(self, category: str) -> None:
        """From now on the time is `category`'s (the phase the fit is in changes: setup, train, teardown)."""
        if not self.running:
            return
        now = time.perf_counter()
        self.seconds[self._current] += now - self._mark
        self._current, self._mark = category, now

    @contextmanager
    def timed(self, category: str) -> Iterator[None]:
        self.enter(category)
        try:
            yield
        finally:
            self.leave()

    def beats_into(self, path: Path) -> None:
        """The run's heartbeat file (recorded in its checkpoints for a resumed run to read)."""
        self.heartbeat_path = str(path.resolve())

    def saving(self, asynchronous: bool) -> AbstractContextManager[None]:
        """Around a checkpoint save: the whole write, or (in the background) what it stalls."""
        return self.timed("checkpoint_async" if asynchronous else "checkpoint")

    def totals(self) -> dict[str, float]:
        """The seconds by category up to now (the current stretch and the loop's data wait booked)."""
        if self.running:
            now = time.perf_counter()
            self.seconds[self._current] += now - self._mark
            self._mark = now
            waited = self._data_wait()
            moved, self._waited = waited - self._waited, waited
            self.seconds["data"] += moved
            self.seconds["train"] -= moved  # the wait happened inside the loop, booked to train
        return dict(self.seconds)

    def stop(self) -> None:
        self.totals()
        self.running = False

    # -- the checkpoint's entry ------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "job": self.job,
            "run": self.run,
            "runs": self.runs,
            "seconds": self.totals(),
            "saved_at": time.time(),
            "heartbeat": self.heartbeat_path,
            "run_compile_s": self.run_seconds()["compile"],  # what its compiled artifacts cost to build
        }

    def run_seconds(self) -> dict[str, float]:
        """This run's seconds by category (the restart's losses included)."""
        totals = self.totals()
        return {c: totals[c] - self._before[c] for c in CATEGORIES}

    def compiled_from(self, source: Path, served: Callable[[], int]) -> None:
        """This run loaded compiled artifacts (saved beside its checkpoint): said with the time saved,
        or, when `served()` counts no graph taken from them, that they served nothing."""
        self._cached_from, self._served = str(source), served

    def save_into(self, checkpoint: dict[str, Any]) -> None:
        """Its entry in surge's own part of a checkpoint (the keys Lightning reads are unchanged)."""
        if self.used:
            checkpoint.setdefault("surge", {})["goodput"] = self.state_dict()

    def restore_from(self, checkpoint: Mapping[str, Any], path: Any = None) -> None:
        resume(self, checkpoint, path)

    def load_state_dict(
        self,
        saved: Mapping[str, Any] | None,
        heartbeat: Mapping[str, Any] | None,
        where: str = "the checkpoint",
    ) -> None:
        """Take over the job's history from a checkpoint's entry (checked: `CheckpointError` naming a
        malformed key), and book what the restart lost (see `restart_losses`). An entry of a newer
        version or none at all: this run is counted alone, and said so."""
        if not saved or saved.get("version") != VERSION:
            why = (
                "none"
                if not saved
                else f"version {repr(saved.get('version'))[:40]}, this surge reads {VERSION}"
            )
            self.notes.append(f"the checkpoint holds no goodput accounting ({why}): earlier runs not counted")
            return
        saved = checked_entry(saved, where)
        self.job, self.runs = saved["job"], saved["runs"] + 1
        for c, s in saved["seconds"].items():
            self.seconds[c if c in self.seconds else "other"] += float(s)
        self._before = dict(self.seconds)
        self._saver_compile_s = float(saved.get("run_compile_s", 0.0))
        losses, note = restart_losses(saved, heartbeat, self.process_start, self.started_unix)
        for c, s in losses.items():
            self.seconds[c] += s
        if note:
            self.notes.append(note)

    def count_flops(
        self, device: torch.device, compiled: bool, uncounted: str | None = None
    ) -> StepFlops | None:
        """The counter of the fit's first step (None under compile=: a dispatch mode around a
        compiled step would compile it again; None where the strategy says why not, `uncounted`)."""
        self.flops = None if compiled or uncounted else StepFlops(device)
        if compiled:
            self.notes.append("FLOPs not counted under compile= (no MFU)")
        elif uncounted:
            self.notes.append(f"FLOPs not counted {uncounted} (no MFU)")
        return self.flops

    def report(self, steps: int = 0, batches: int = 0) -> Goodput:
        """The job's accounting now; `steps`: optimizer steps, `batches`: batches trained (for FLOP/s)."""
        seconds = self.totals()
        extra = self.flops.values(seconds["train"], batches) if self.flops is not None else {}
        notes, run = list(self.notes), self.run_seconds()
        if self._cached_from and self._served() > 0:
            notes.append(
                f"compile: {run['compile']:.2f} s in this run with the compiled artifacts saved beside its "
                f"checkpoint (the run that saved them compiled for {self._saver_compile_s or 0.0:.2f} s)"
            )
        elif self._cached_from:
            notes.append(
                f"compile: {run['compile']:.2f} s; the artifacts read from {self._cached_from} served none of this "
                "run's graphs (another model's, or other settings'): it compiled afresh"
            )
        if self.flops is not None and self.flops.uncounted == NO_BACKWARD:
            notes.append(
                "no FLOP/s: the first step ran no backward (its count, a forward alone, is no step's)"
            )
        elif self.flops is not None and self.flops.uncounted:
            notes.append(
                f"no FLOP/s: the first step ran {self.flops.uncounted}, whose FLOPs the count cannot see"
            )
        if extra.get("flops_per_s") and extra.get("mfu") is None and extra.get("device", "cpu") != "cpu":
            notes.append(f"no MFU: {extra['device']}'s dense peak is not in surge's table (PEAK_DENSE_FLOPS)")
        return Goodput(seconds, self.runs, steps, notes=tuple(notes), run_seconds=run, **extra)


def restart_losses(saved: Mapping[str, Any], heartbeat: Mapping[str, Any] | None,
                   process_start: float | None, fit_start: float) -> tuple[dict[str, float], str]:  # fmt: skip
    """What a restart from checkpoint entry `saved` lost, from the previous run's heartbeat:

    - it ended normally ("finished"): nothing lost; the stretch from its checkpoint to this fit is
      `between_runs` (its last hooks, then no run at all until this one);
    - it died or failed after the checkpoint: `redone` = its last sign of life - the checkpoint's
      time (the steps it trained after the checkpoint are trained again), `downtime` = this
      process's start - that sign of life, `startup` = this fit's start - this process's start;
    - no heartbeat of that run (another machine, or overwritten): the whole gap from the
      checkpoint to this fit is `downtime`, redone work unknown (said so).
    """
    saved_at = float(saved["saved_at"])
    gap = max(0.0, fit_start - saved_at)
    if heartbeat is None or heartbeat.get("run") != saved["run"]:
        return {
            "downtime": gap
        }, "no heartbeat of the previous run: its work after the checkpoint is counted as downtime"
    last = min(fit_start, max(saved_at, float(heartbeat["time"])))
    if heartbeat.get("status") == "finished":
        return {"between_runs": gap}, ""
    start = process_start if process_start is not None and process_start >= last else last
    losses = {"redone": last - saved_at, "downtime": start - last, "startup": max(0.0, fit_start - start)}
    return losses, ""


def process_start_time() -> float | None:
    """This process's start (Unix time), from /proc on Linux; None elsewhere."""
    try:
        stat = Path(f"/proc/{os.getpid()}/stat").read_text()
        started_ticks = int(stat.rsplit(")", 1)[1].split()[19])
        boot = next(line for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime"))
        return int(boot.split()[1]) + started_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


_first_fit = [True]  # the process's first fit: its start is this process's start (a resumed job's startup)


def read_heartbeat(path: str) -> dict[str, Any] | None:
    """The heartbeat at `path` (a path a checkpoint names): read only when it is a regular file of
    bounded size, and kept only when its time is a finite number; else None (no heartbeat)."""
    if not path:
        return None
    try:
        record = json.loads(read_bounded(path, MAX_HEARTBEAT_BYTES))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not _number(record.get("time"), 0.0, 1e11):
        return None
    return record


def checked_entry(saved: Any, where: str) -> Mapping[str, Any]:
    """A checkpoint's goodput entry of this version, each value checked (`CheckpointError` naming
    the key, as for the rest of the checkpoint)."""
    if not isinstance(saved, Mapping):
        raise _malformed(where, "", saved, "a dict")
    expect: dict[str, tuple[Callable[[Any], bool], str]] = {
        "job": (lambda v: isinstance(v, str) and 0 < len(v) <= 200, "a job id (a short string)"),
        "run": (lambda v: isinstance(v, str) and 0 < len(v) <= 200, "a run id (a short string)"),
        "runs": (lambda v: type(v) is int and 1 <= v <= 10**9, "a count of runs (1 or more)"),
        "saved_at": (lambda v: _number(v, 0.0, 1e11), "a Unix time"),
        "heartbeat": (lambda v: isinstance(v, str) and len(v) <= 4096, "a path (a string)"),
        "seconds": (_seconds, f"a dict of category: seconds (each from 0 to {MAX_SECONDS:g})"),
    }
    for key, (ok, what) in expect.items():
        if key not in saved or not ok(saved[key]):
            raise _malformed(where, key, saved.get(key, "<missing>"), what)
    if "run_compile_s" in saved and not _number(saved["run_compile_s"], 0.0, MAX_SECONDS):
        raise _malformed(where, "run_compile_s", saved["run_compile_s"], f"seconds (0 to {MAX_SECONDS:g})")
    return saved


def _number(value: Any, low: float, high: float) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and low <= value <= high
    )


def _seconds(value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        and len(value) <= 64
        and all(isinstance(k, str) and _number(v, 0.0, MAX_SECONDS) for k, v in value.items())
    )


def _malformed(where: str, key: str, value: Any, what: str) -> CheckpointError:
    name = "surge.goodput" + (f".{key}" if key else "")
    return CheckpointError(
        f"{where}: its {name} = {repr(value)[:80]} is not {what}; the checkpoint is damaged"
    )


def resume(ledger: GoodputLedger, ckpt: Mapping[str, Any], path: Any = None) -> None:
    """Take over the job's accounting from a loaded checkpoint, with its run's heartbeat."""
    where = f"checkpoint {path}" if path is not None else "the checkpoint"
    surge = ckpt.get("surge")
    saved = surge.get("goodput") if isinstance(surge, Mapping) else None
    if saved is not None and not isinstance(saved, Mapping):
        raise _malformed(where, "", saved, "a dict")
    current = saved is not None and saved.get("version") == VERSION
    heartbeat = read_heartbeat(checked_entry(saved, where)["heartbeat"]) if current else None
    ledger.load_state_dict(saved, heartbeat, where)


def _si(value: float) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g} {prefix}"
    return f"{value:.3g} "


def _no_wait() -> float:
    return 0.0


def _none_served() -> int:
    return 0


REPORTS = ("line", "table", "off")  # Trainer(goodput_report=...)


def say(goodput: Goodput, report: str) -> None:
    """The fit's end: one line, the table, or nothing."""
    if report != "off":
        info(goodput.line() if report == "line" else goodput.table())
