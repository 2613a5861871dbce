"""The process's one thread for periodic writes (a checkpoint folder's lease, the goodput heartbeat):
jobs run again and again, a cancel waits for a run under way and no run follows it, a failing job is
reported and stops, a forked child starts afresh, and a fit after a fit starts no thread of surge's."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import pytest

import surge
from helpers import make_loaders, make_model
from surge.config.ticker import TICKER, Ticker

DEADLINE_S = 60.0  # only a hung ticker reaches it


def _counter(n: int) -> tuple[list[int], threading.Event, Callable[[], None]]:
    """A job that records its runs, its record, and an event set at its `n`-th run."""
    runs: list[int] = []
    done = threading.Event()

    def record() -> None:
        runs.append(len(runs))
        if len(runs) >= n:
            done.set()

    return runs, done, record


def test_a_job_runs_again_and_again_until_cancelled_and_never_after():
    ticker = Ticker()
    runs, three, record = _counter(3)
    job = ticker.every(0.001, record)
    assert three.wait(DEADLINE_S)
    job.cancel()
    seen = len(runs)
    _, more, record_more = _counter(3)
    ticker.every(0.001, record_more)  # the thread goes on
    assert more.wait(DEADLINE_S)
    assert len(runs) == seen
    assert ticker._jobs and job not in ticker._jobs


def test_a_cancel_waits_for_the_run_under_way():
    ticker = Ticker()
    started, release, order = threading.Event(), threading.Event(), []

    def slow() -> None:
        started.set()
        release.wait(DEADLINE_S)
        order.append("run done")

    job = ticker.every(0.001, slow)
    assert started.wait(DEADLINE_S)
    canceller = threading.Thread(target=lambda: (job.cancel(), order.append("cancelled")))
    canceller.start()
    canceller.join(0.2)
    assert canceller.is_alive()  # held by the run under way (for as long as it lasts)
    release.set()
    canceller.join(DEADLINE_S)
    assert order == ["run done", "cancelled"]


def test_a_job_may_cancel_itself():
    ticker = Ticker()
    cancelled = threading.Event()
    jobs = []

    def once() -> None:
        jobs[0].cancel()
        cancelled.set()

    jobs.append(ticker.every(0.001, once))
    assert cancelled.wait(DEADLINE_S)
    assert jobs[0].cancelled and not ticker._jobs


def test_a_failing_job_is_reported_and_stops_while_the_others_go_on(monkeypatch):
    ticker, reported = Ticker(), []
    monkeypatch.setattr(threading, "excepthook", lambda args: reported.append(args.exc_value))

    def broken() -> None:
        raise ValueError("disk on fire")

    job = ticker.every(0.001, broken)
    _, three, record = _counter(3)
    ticker.every(0.001, record)
    assert three.wait(DEADLINE_S)
    assert [str(e) for e in reported] == ["disk on fire"] and job.cancelled


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_forked_child_has_none_of_its_parents_jobs_and_runs_its_own():
    parent_job = TICKER.every(3600.0, lambda: None)
    try:
        pid = os.fork()
        if pid == 0:  # the child: a bare ticker, which starts its own thread
            ok = not TICKER._jobs and TICKER._thread is None and parent_job.cancelled
            _, child_done, record = _counter(2)
            TICKER.every(0.001, record)
            parent_job.cancel()  # (the parent's job, cancelled here, does not hang)
            os._exit(0 if ok and child_done.wait(DEADLINE_S) else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert parent_job in TICKER._jobs  # the parent's own are untouched
    finally:
        parent_job.cancel()


def test_a_fit_after_a_fit_starts_no_thread_of_surges(tmp_path, monkeypatch):
    """Checkpointing's lease and goodput's heartbeat are jobs on the ticker: no thread per fit."""
    model, (train, _) = make_model(), make_loaders()
    trainer = surge.Trainer(max_steps=2, default_root_dir=tmp_path, enable_progress_bar=False)
    trainer.fit(model, train)
    started: list[str] = []
    start = threading.Thread.start

    def counted(self: threading.Thread) -> None:
        started.append(self.name)
        start(self)

    monkeypatch.setattr(threading.Thread, "start", counted)
    surge.Trainer(max_steps=2, default_root_dir=tmp_path / "again", enable_progress_bar=False).fit(
        model, train
    )
    assert not [name for name in started if name.startswith("surge")], started
    assert list((tmp_path / "again").rglob("*.ckpt"))  # (checkpointing, with its lease, was on)
