"""One daemon thread per process for surge's periodic writes (a checkpoint folder's lease refresh,
the goodput heartbeat): a fit adds its jobs and takes them off again without starting or joining a
thread of its own (a thread's start and join each wait for the scheduler: on a busy machine they
cost a short fit milliseconds).

Jobs run one after another, so each must be a short write: one that blocks (a hung filesystem)
delays the others as long. The thread starts with the first job. `Job.cancel` returns once no run
of the job is in progress and none will start; a job cancelled from inside its own run does not
wait for itself. A job that raises is reported as an uncaught exception in a thread would be
(`threading.excepthook`) and runs no more. A process made by fork has no thread and no job of its parent's (as with a thread per job,
which fork does not copy); its own first job starts its own thread.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable


class Job:
    """`fn` every `period` seconds on the ticker's thread, until `cancel`."""

    def __init__(self, ticker: Ticker, period: float, fn: Callable[[], object]) -> None:
        self.period, self.fn = period, fn
        self.due = time.monotonic() + period
        self.cancelled = False
        self._ticker = ticker
        self._running = threading.RLock()  # held while `fn` runs; re-entered by a cancel from inside it

    def cancel(self) -> None:
        """Stop the job; waits for a run in progress on another thread to finish."""
        self.cancelled = True  # no run starts from now on (`_run` reads it holding `_running`)
        with self._running:  # a run under way finishes first
            pass
        self._ticker._remove(self)

    def _next(self, now: float) -> None:
        """Due again one period from `now` (the ticker, as it starts a run)."""
        self.due = now + self.period

    def _orphan(self) -> None:
        """In a forked child: not this process's job (a lock the parent's thread held is let go)."""
        self._running, self.cancelled = threading.RLock(), True

    def _run(self) -> None:
        with self._running:
            if self.cancelled:
                return
            try:
                self.fn()
            except Exception:
                self.cancelled = True
                threading.excepthook(threading.ExceptHookArgs([*sys.exc_info(), threading.current_thread()]))


class Ticker:
    """The process's thread for periodic jobs (`every`)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._jobs: list[Job] = []
        self._thread: threading.Thread | None = None

    def every(self, period: float, fn: Callable[[], object]) -> Job:
        """Run `fn` every `period` seconds from now on (first after one period)."""
        job = Job(self, period, fn)
        with self._changed:
            self._jobs.append(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="surge-ticker", daemon=True)
                self._thread.start()
            self._changed.notify()
        return job

    def _remove(self, job: Job) -> None:
        with self._changed:
            if job in self._jobs:
                self._jobs.remove(job)

    def _loop(self) -> None:
        while True:
            with self._changed:
                now = time.monotonic()
                due = [job for job in self._jobs if job.due <= now]
                if not due:
                    wait = min((job.due for job in self._jobs), default=now + 3600.0) - now
                    self._changed.wait(wait)
                    continue
                for job in due:
                    job._next(now)
            for job in due:  # (outside the lock: a job may add or cancel jobs)
                job._run()
                if job.cancelled:
                    self._remove(job)

    def _after_fork(self) -> None:
        """In a forked child: the parent's thread is not there, nor are its jobs this process's."""
        for job in self._jobs:
            job._orphan()
        self._changed, self._jobs, self._thread = threading.Condition(), [], None


TICKER = Ticker()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=TICKER._after_fork)
