"""Preemption: SIGTERM, SIGINT and SIGUSR1 become a flag; the fit loop acts on it at a step boundary.

The handler only records the signal (never saves from inside a handler). At the next step
boundary the loop writes a checkpoint, under SLURM requeues the job on the requeue signal (SIGUSR1,
sent by `--signal=USR1@90`, unless a `RequeuePolicy` names another or none), and exits with 143
(SIGTERM) or 130 (SIGINT). A second SIGINT aborts at once.

SLURM, container runtimes and Ctrl-C signal the whole process group, DataLoader workers too; a
worker that dies of it fails the main process before it can save. `WorkerSignals` (the
`worker_init_fn` the loader preparation gives every loader with workers) makes each worker leave
these signals to the main process, and end the moment that process is
gone, however it died.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import re
import select
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from ..rank_zero import info, warn

EXIT_CODES: dict[int, int] = {signal.SIGTERM: 143, signal.SIGINT: 130}


@dataclass(frozen=True)
class RequeuePolicy:
    """Which signal checkpoints, requeues the SLURM job and exits 0: SIGUSR1 by default; None: no
    handler for one at all (its own disposition applies, as Lightning's `SLURMEnvironment(auto_requeue=False)`).
    SIGTERM and SIGINT still checkpoint and exit."""

    signal: int | None = signal.SIGUSR1
    # Lightning's way (the Lightning mode's): the requeue checkpoint is `hpc_ckpt_<N+1>.ckpt` in
    # default_root_dir, and under SLURM fit() without ckpt_path resumes from the newest of them.
    hpc: bool = False

    def save_path(self, sig: int, default_root_dir: str | Path, folder: Path) -> Path:
        """Where the checkpoint of signal `sig` goes: `folder/last.ckpt`, or Lightning's HPC name."""
        if not (self.hpc and sig == self.signal):
            return folder / "last.ckpt"
        latest = _latest_hpc(Path(default_root_dir))
        return Path(default_root_dir) / f"hpc_ckpt_{(latest or 0) + 1}.ckpt"

    def resume_path(self, ckpt_path: Any, default_root_dir: str | Path) -> Any:
        """`ckpt_path` as given, or, with `hpc` under SLURM (srun, not an interactive job) and no path
        given, the newest `hpc_ckpt_<N>.ckpt` in default_root_dir (a requeued job goes on)."""
        if ckpt_path is not None or not self.hpc or not _srun_used():
            return ckpt_path
        latest = _latest_hpc(Path(default_root_dir))
        return None if latest is None else str(Path(default_root_dir) / f"hpc_ckpt_{latest}.ckpt")

    def signals(self) -> tuple[int, ...]:
        """The signals a fit handles."""
        sigs = [signal.SIGTERM, signal.SIGINT]
        return (*sigs, self.signal) if self.signal is not None and self.signal not in sigs else tuple(sigs)

    def exit_code(self, sig: int) -> int:
        return 0 if sig == self.signal else EXIT_CODES.get(sig, 143)


def _latest_hpc(folder: Path) -> int | None:
    """The largest N of the `hpc_ckpt_<N>.ckpt` files in `folder`, or None."""
    numbers = [int(m.group(1)) for f in _listing(folder) if (m := re.fullmatch(r"hpc_ckpt_(\d+)\.ckpt", f))]
    return max(numbers) if numbers else None


def _listing(folder: Path) -> list[str]:
    try:
        return [entry.name for entry in os.scandir(folder)]
    except OSError:
        return []


def _srun_used() -> bool:
    """SLURM started this process (its job is not an interactive one), as Lightning detects it."""
    return "SLURM_NTASKS" in os.environ and os.environ.get("SLURM_JOB_NAME") not in ("bash", "interactive")


class Preempted(SystemExit):
    """Raised at a step boundary after a signal, once the checkpoint is written."""


class SignalFlag:
    """Installs the handlers for the duration of a fit (main thread only) and remembers the signal;
    `requeue` says which signal is the requeue trigger."""

    def __init__(self, forward_to: Any = None, requeue: RequeuePolicy | None = None) -> None:
        self.received: int | None = None
        self.requeue = requeue if requeue is not None else RequeuePolicy()
        self._previous: dict[int, Any] = {}
        self._forward_to = forward_to  # surge's launcher: its children get the signal too

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in self.requeue.signals():
            self._previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    @contextlib.contextmanager
    def installed(self) -> Iterator[SignalFlag]:
        """The handlers installed for the body, the previous ones put back after it."""
        self.install()
        try:
            yield self
        finally:
            self.restore()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and self.received == signal.SIGINT:
            raise KeyboardInterrupt  # the second Ctrl-C: stop now
        self.received = signum
        if self._forward_to is not None:
            for child in self._forward_to.children:
                if child.poll() is None:
                    child.send_signal(signum)


def requeue_slurm_job() -> bool:
    """`scontrol requeue $SLURM_JOB_ID` (rank zero only); True if it was requeued."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return False
    # Said first: the requeue ends this job step, and with it this process's output.
    info(f"requeueing SLURM job {job}; it resumes from the last checkpoint with ckpt_path='auto'")
    done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        warn(f"scontrol requeue {job} failed: {done.stderr.strip()}")
        return False
    return True


class WorkerSignals:
    """A DataLoader `worker_init_fn`: the worker leaves SIGTERM/SIGINT/SIGUSR1 to the main process,
    then the user's own `worker_init_fn` (if any) runs.

    SIGINT and SIGUSR1 are ignored. SIGTERM is obeyed only from the process that started the worker
    (the DataLoader's shutdown, multiprocessing's at exit): it is blocked, and a thread waits for it
    with `sigwaitinfo`, which names the sender. From the parent it ends the worker with exit code 0,
    as torch's own worker handler does, so the main process reports nothing; from anyone else it is
    dropped. Processes a worker starts inherit the ignored and blocked signals. The worker also ends
    the moment its parent is gone (`exit_with_parent`).
    """

    def __init__(self, user_fn: Callable[[int], None] | None) -> None:
        self.user_fn = user_fn

    def __call__(self, worker_id: int) -> None:
        leave_signals_to_parent()
        exit_with_parent()  # after: its thread must inherit the blocked SIGTERM
        if self.user_fn is not None:
            self.user_fn(worker_id)


def leave_signals_to_parent() -> None:
    """In a worker process: ignore SIGINT/SIGUSR1, and SIGTERM from anyone but the parent."""
    for sig in (signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, signal.SIG_IGN)
    if not hasattr(signal, "sigwaitinfo"):  # macOS: the sender cannot be told; SIGTERM stays fatal
        return
    parent = getattr(multiprocessing.parent_process(), "pid", None) or os.getppid()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # threads started later inherit it
    threading.Thread(target=_obey_parent, args=(parent,), name="surge-sigterm", daemon=True).start()


def _obey_parent(parent: int) -> None:
    while True:
        if signal.sigwaitinfo({signal.SIGTERM}).si_pid == parent:
            os._exit(0)


def exit_with_parent() -> None:
    """In a worker process: exit as soon as the process that started it ends (Linux; elsewhere torch's
    own check is all there is).

    torch's check compares `os.getppid()` with the value it read once the worker's init had run. A
    parent killed before that is recorded as pid 1 and never missed, and a worker blocked reading a
    message its killed parent only half wrote never checks again: either way the worker would wait
    forever. A pidfd of the parent becomes readable the moment the parent exits.
    """
    parent = multiprocessing.parent_process()
    if parent is None or parent.pid is None or not hasattr(os, "pidfd_open"):
        return
    try:
        watched = os.pidfd_open(parent.pid)
    except ProcessLookupError:  # gone already
        os._exit(0)
    except OSError:  # a kernel without pidfds (before Linux 5.3)
        return
    threading.Thread(target=_exit_when_readable, args=(watched,), name="surge-parent", daemon=True).start()


def _exit_when_readable(fd: int) -> None:
    select.select([fd], [], [])
    os._exit(0)
