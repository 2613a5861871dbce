"""Preemption: SIGTERM, SIGINT and SIGUSR1 become a flag; the fit loop acts on it at a step boundary.

The handler only records the signal (never saves from inside a handler). At the next step
boundary the loop writes a checkpoint, under SLURM requeues the job on SIGUSR1 (sent by
`--signal=USR1@90`), and exits with 143 (SIGTERM) or 130 (SIGINT). A second SIGINT aborts at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from types import FrameType
from typing import Any

from .rank_zero import info, warn

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
EXIT_CODES = {signal.SIGTERM: 143, signal.SIGINT: 130, signal.SIGUSR1: 0}


class Preempted(SystemExit):
    """Raised at a step boundary after a signal, once the checkpoint is written."""


class SignalFlag:
    """Installs the handlers for the duration of a fit (main thread only) and remembers the signal."""

    def __init__(self, forward_to: Any = None) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}
        self._forward_to = forward_to  # surge's launcher: its children get the signal too

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

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
