"""Starting the ranks of one stage from inside `fit()` (`validate`, `test`, `predict`): spawn, fork
or forkserver, for notebooks and interactive sessions, where there is no script to run again.

The main process starts `world_size` processes with `torch.multiprocessing.start_processes`, each
runs the stage as one rank of a process group, and rank zero's outcome comes back to the main
process through a file in a private temporary folder (never a pipe the parent reads only after
joining: a large outcome would block the child that writes it). With spawn and forkserver what
the ranks are given is pickled here, in the main process, before any process starts, so what
cannot pickle is named at once. A failing rank ends the others and is raised in the main process
with its traceback; no process outlives `launch`.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.multiprocessing as mp
from torch.multiprocessing import ProcessExitedException, ProcessRaisedException

from ..errors import MisconfigurationError, SurgeRuntimeError, bad_value
from .environment import ClusterEnvironment
from .main_guard import check_not_importing
from .pickling import unpicklable
from .rank_state import GlobalState
from .subprocess_launcher import free_port

START_METHODS = ("spawn", "fork", "forkserver")
GRACE_S = (
    10.0  # after a rank fails, the others get this long to end by themselves, then as long after SIGTERM
)
OUTCOME = "outcome.pt"


class RankJob(Protocol):
    """What the launcher runs: the stage in each rank, and rank zero's outcome in the main process."""

    def run_rank(self, env: ClusterEnvironment) -> Any:
        """In each started process, as rank `env.global_rank`; rank zero's return value comes back."""

    def parts(self) -> list[tuple[str, Any]]:
        """(name, object) for what is sent to the ranks: an error names the one that does not pickle."""

    def failure_time(self) -> float | None:
        """After `run_rank` raised: when this rank began to stop (`time.monotonic()`), or None."""

    def take(self, outcome: Any) -> Any:
        """In the main process: apply rank zero's outcome; returns what the stage returns."""


class RankFailedError(ProcessRaisedException, SurgeRuntimeError):
    """A rank that a stage started failed; the message holds its traceback. Also torch's
    `ProcessRaisedException`, which Lightning's spawn-based strategies raise."""


def is_interactive() -> bool:
    """An interactive interpreter or a notebook kernel: no script that a new process could run again."""
    return hasattr(sys, "ps1") or bool(sys.flags.interactive)


def check_start_method(start_method: str, where: str = "start_method") -> None:
    """Refuse a start method this platform does not have, by name."""
    if start_method not in START_METHODS:
        raise bad_value(where, start_method, "'popen', 'spawn', 'fork' or 'forkserver'")
    if start_method not in mp.get_all_start_methods():
        raise bad_value(
            where, start_method,
            f"a start method this platform has: {', '.join(mp.get_all_start_methods())} (or 'popen')",
        )  # fmt: skip


class MultiprocessingLauncher:
    """Starts `processes` ranks with `start_method` for each stage; the main process takes no rank."""

    def __init__(self, processes: int, start_method: str) -> None:
        check_start_method(start_method)
        self.processes, self.start_method = processes, start_method
        self.procs: list[Any] = []  # the last stage's processes (ended when `launch` returns)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "procs": []}  # processes do not pickle (and a rank needs none)

    def launch(self, job: RankJob, stage: str) -> Any:
        """Run `job` in `processes` new processes; returns what `job.take` makes of rank zero's outcome."""
        self._check_can_start(stage)
        env = ClusterEnvironment(
            source="surge",
            world_size=self.processes,
            local_world_size=self.processes,
            master_port=free_port(),
        )
        forked = self.start_method == "fork"
        payload: Any = job if forked else _pickled(job, stage, self.start_method)
        state = None if forked else GlobalState.capture()  # a forked rank has the parent's already
        with tempfile.TemporaryDirectory(prefix="surge-ranks-") as folder:
            context = mp.start_processes(
                _rank_main, args=(payload, env, folder, state), nprocs=self.processes,
                start_method=self.start_method, join=False,
            )  # fmt: skip
            self.procs = list(context.processes)
            try:
                while not context.join(grace_period=GRACE_S):
                    pass
            except (ProcessRaisedException, ProcessExitedException) as err:
                raise _failure(Path(folder), err, stage, self.start_method, self.procs) from None
            finally:
                _end(self.procs)  # an interrupt of the main process must not leave ranks running
            outcome = torch.load(
                Path(folder) / OUTCOME, map_location="cpu", weights_only=False
            )  # our own file
        return job.take(outcome)

    def _check_can_start(self, stage: str) -> None:
        if self.start_method != "spawn" and torch.cuda.is_available() and torch.cuda.is_initialized():
            raise MisconfigurationError(
                f"{stage}() cannot start its ranks with start_method={self.start_method!r}: CUDA is already "
                "initialised in this process (a CUDA tensor, a model moved to the GPU, a torch.cuda call), and a "
                "forked process cannot use CUDA then. Keep CUDA out of the main process before the Trainer runs "
                "(restart the kernel in a notebook), or use strategy='ddp_spawn' or 'ddp' (a script)."
            )
        check_not_importing(stage)  # (the Trainer checks first; a launcher used alone checks too)


def _pickled(job: RankJob, stage: str, start_method: str) -> bytes:
    """The job as bytes (plain pickle: tensors are copied, never shared between the ranks), or an
    error naming what does not pickle."""
    try:
        return pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as err:
        found = (unpicklable(part, name) for name, part in job.parts())
        path, why = next((f for f in found if f is not None), ("the stage", err))
        raise MisconfigurationError(
            f"{stage}() with start_method={start_method!r} sends the Trainer, the model and the data to new "
            f"processes by pickling them, and {path} does not pickle ({type(why).__name__}: {why}). Define "
            "classes and functions at a module's top level (not inside a function, not a lambda), keep "
            "open files, locks, sockets and generators out of the model, data and callbacks, or use "
            "strategy='ddp_fork' (nothing is pickled) or 'ddp' (a script)."
        ) from err


def _rank_main(
    index: int, payload: Any, env: ClusterEnvironment, folder: str, state: GlobalState | None
) -> None:
    """In each started process: become rank `index`, run the job; rank zero writes the outcome."""
    env = dataclasses.replace(env, global_rank=index, local_rank=index)
    os.environ.update(env.variables())  # as the ranks surge starts from a script have them
    rank_zero = sys.modules.get("lightning_utilities.core.rank_zero")  # it read them at its import
    if rank_zero is not None:
        rank_zero.rank_zero_only.rank = index
    if state is not None:
        state.restore()
    job: RankJob = pickle.loads(payload) if isinstance(payload, bytes) else payload
    try:
        outcome = job.run_rank(env)
    except BaseException:
        stamp = job.failure_time() or time.monotonic()
        record = {"rank": index, "time": stamp, "traceback": traceback.format_exc()}
        (Path(folder) / f"rank{index}.error").write_bytes(pickle.dumps(record))
        raise
    if index == 0:
        torch.save(outcome, Path(folder) / f"{OUTCOME}.partial")
        os.replace(Path(folder) / f"{OUTCOME}.partial", Path(folder) / OUTCOME)


def _failure(
    folder: Path, err: Exception, stage: str, start_method: str, procs: list[Any]
) -> RankFailedError:
    """The error of the rank that failed first (its peers' errors follow from it), with its traceback."""
    records = sorted(
        (pickle.loads(p.read_bytes()) for p in folder.glob("rank*.error")), key=lambda r: r["time"]
    )
    index, pid = getattr(err, "error_index", 0), getattr(err, "error_pid", 0)
    if not records:  # it ended before the stage ran (or was killed): its own output says why
        message = (
            f"surge: rank {index} of {stage}() ({start_method!r}) ended without running the stage: {err}. "
            "Its output above says why (with 'spawn', a script whose Trainer calls are not under "
            '`if __name__ == "__main__":` fails this way).'
        )
        return RankFailedError(message, index, pid)
    first = records[0]
    message = f"surge: rank {first['rank']} failed in {stage}() ({start_method!r}):\n\n{first['traceback']}"
    for r in records[1:]:
        message += f"\n(rank {r['rank']} stopped after it: {r['traceback'].strip().splitlines()[-1]})"
    return RankFailedError(message, first["rank"], procs[first["rank"]].pid)


def _end(procs: list[Any]) -> None:
    """SIGTERM any process still running, SIGKILL after the grace, and reap them all."""
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.terminate()
    deadline = time.monotonic() + GRACE_S
    for p in alive:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
    for p in procs:
        p.join()
