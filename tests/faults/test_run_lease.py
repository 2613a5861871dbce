"""The claim on a checkpoint folder is a lease (src/surge/config/run_lease.py): refreshed while its
run lives, lapsed when it is gone, on whatever machine it ran. Before, a lock from another host name
counted as a live run forever, so a run killed -9 on one node blocked every requeue on another (and
every pod restarted under a new host name) until a person deleted it.

The clocks are injected: a watch "waits" by calling the test's `sleep`, which advances a fake clock
or makes the holder refresh, so what the watch sees is decided, never raced."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import TinyModel, fast_trainer, make_loaders
from surge.callbacks import Callback, ModelCheckpoint
from surge.config import run_lease
from surge.config.run_lease import Holder, LeaseHeld, RunLease, machine
from surge.config.run_records import lock_file
from surge.errors import MisconfigurationError

OTHER = ("node-b", "boot-of-node-b")  # another machine (or this one's pod restarted elsewhere)


class FakeClock:
    """Monotonic time that moves only when slept; `during_sleep` runs at each sleep (a holder's refresh)."""

    def __init__(self, during_sleep=None) -> None:
        self.now, self.slept, self.during_sleep = 0.0, 0, during_sleep

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept += 1
        self.now += seconds
        if self.during_sleep is not None:
            self.during_sleep()


def observer(path: Path, clock: FakeClock, me=("node-a", "boot-of-node-a"), wall=time.time) -> RunLease:
    return RunLease(path, ttl=30.0, refresh=5.0, clock=clock, sleep=clock.sleep, wall=wall, me=me)


def held_by_another_machine(path: Path) -> RunLease:
    holder = RunLease(path, ttl=30.0, refresh=5.0, me=OTHER)
    assert holder._create()  # its file, without its refresh thread: the test refreshes it
    return holder


def test_a_lease_of_another_machine_that_is_not_refreshed_lapses_and_is_taken(tmp_path):
    path = tmp_path / "lease"
    held_by_another_machine(path)
    clock = FakeClock()
    mine = observer(path, clock)
    mine.acquire()
    try:
        assert clock.now == 30.0 and clock.slept == 6  # watched for the whole TTL, one look per refresh
        holder = mine.read()
        assert holder is not None and (holder.host, holder.pid) == ("node-a", os.getpid())
    finally:
        mine.release()
    assert not path.exists()


def test_a_lease_of_another_machine_that_is_refreshed_is_refused(tmp_path):
    path = tmp_path / "lease"
    other = held_by_another_machine(path)
    clock = FakeClock(during_sleep=other.renew)  # the other run lives: it refreshes while we watch
    with pytest.raises(LeaseHeld) as held:
        observer(path, clock).acquire()
    assert str(held.value) == f"node-b {os.getpid()}" and clock.slept == 1
    assert Holder.parse(path.read_bytes()).host == "node-b"  # left as it was


def test_a_lease_not_refreshed_for_longer_than_the_ttl_is_taken_at_once(tmp_path):
    path = tmp_path / "lease"
    held_by_another_machine(path)
    clock = FakeClock()
    mine = observer(path, clock, wall=lambda: time.time() + 31.0)  # its last refresh: 31 s ago
    mine.acquire()
    mine.release()
    assert clock.slept == 0


def test_on_this_machine_a_dead_pid_is_stale_and_a_live_one_refused_at_once(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    path, here = tmp_path / "lease", machine()
    path.write_bytes(Holder(*here, gone.pid, 1, time.time()).to_bytes())
    clock = FakeClock()
    mine = observer(path, clock, me=here)
    mine.acquire()  # a killed process of this machine: no wait
    assert clock.slept == 0
    mine.release()
    path.write_bytes(Holder(*here, os.getppid(), 1, time.time()).to_bytes())  # a live process's
    with pytest.raises(LeaseHeld):
        observer(path, clock, me=here).acquire()
    assert clock.slept == 0


def test_a_held_lease_is_refreshed_by_its_thread_and_a_file_that_is_no_lease_is_taken(tmp_path):
    path = tmp_path / "lease"
    path.write_text("not a lease")
    lease = RunLease(path, refresh=0.01)
    lease.acquire()
    try:
        first = lease.read()
        assert first is not None
        deadline = time.monotonic() + 60
        while (now := lease.read()) is not None and now.count == first.count:  # an event, not a race
            assert time.monotonic() < deadline, "the lease was never refreshed"
            time.sleep(0.01)
    finally:
        lease.release()
    assert not path.exists()


HOLDER = """
import sys, time
from pathlib import Path
from surge.config.run_lease import RunLease
RunLease(Path(sys.argv[1])).acquire()
print("held", flush=True)
time.sleep(3600)
"""


def kill_9_a_run_holding(directory: Path) -> None:
    """A run's process holds the folder's lease (refreshing it), and is killed with SIGKILL."""
    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "PYTHONPATH": str(src)}
    lease = lock_file(directory, True)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lease)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert Holder.parse(lease.read_bytes()).pid == holder.pid  # the killed run's lease is left behind


def test_a_run_killed_9_on_one_host_resumes_on_another_by_itself(tmp_path, monkeypatch):
    """The requeue runs under another host name (injected: `run_lease.machine`, which reads
    `socket.gethostname()` and the boot id). A dead run refreshes nothing, so the short TTL given to
    the requeue changes how long it watches, never what it sees."""
    directory = tmp_path / "ckpts"
    cb = ModelCheckpoint(dirpath=directory, every_n_train_steps=2, save_last=True)
    fast_trainer(max_steps=2, enable_checkpointing=True, callbacks=[cb]).fit(TinyModel(), *make_loaders())
    kill_9_a_run_holding(directory)  # the run that wrote them, killed -9 mid-fit
    monkeypatch.setattr(run_lease, "machine", lambda: OTHER)
    monkeypatch.setattr(run_lease, "TTL_S", 0.5)
    steps: list[int] = []

    class Steps(Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            steps.append(trainer.global_step)

    cb = ModelCheckpoint(dirpath=directory, every_n_train_steps=2, save_last=True)
    trainer = fast_trainer(max_epochs=1, enable_checkpointing=True, callbacks=[cb, Steps()])
    trainer.fit(TinyModel(), *make_loaders(), ckpt_path="auto")
    assert steps == [2, 3]  # resumed from the killed run's step-2 checkpoint, no person involved
    assert not lock_file(directory, True).exists()


def test_a_live_run_of_another_machine_is_refused_by_the_trainer(tmp_path, monkeypatch):
    directory = tmp_path / "ckpts"
    directory.mkdir()
    other = held_by_another_machine(lock_file(directory, True))
    monkeypatch.setattr(run_lease, "wait", lambda s: other.renew())  # it refreshes while we watch
    cb = ModelCheckpoint(dirpath=directory)
    with pytest.raises(MisconfigurationError, match=r"another run that is still going \(process node-b \d+"):
        fast_trainer(max_epochs=1, enable_checkpointing=True, callbacks=[cb]).fit(
            TinyModel(), *make_loaders()
        )


def test_a_watch_is_said_and_a_holder_whose_lease_was_taken_says_it_lost_it(tmp_path, caplog):
    path = tmp_path / "lease"
    stalled = held_by_another_machine(path)  # a run on node-b that stops refreshing (SIGSTOP, a frozen host)
    clock = FakeClock()
    taker = observer(path, clock)
    with caplog.at_level("INFO"):
        taker.acquire()
    assert any("waiting up to 30 s" in r.message and "node-b" in r.message for r in caplog.records)
    with pytest.warns(
        UserWarning, match=r"lease on its checkpoint folder .* is lost: it was taken over by process node-a"
    ):
        assert stalled.renew() is False  # it comes back: it does not write over the new holder's lease
    assert Holder.parse(path.read_bytes()).host == "node-a"
    taker.release()


def test_a_watch_in_slices_goes_on_across_calls_so_ranks_never_wait_past_their_timeout(tmp_path):
    """Under DDP rank zero watches in slices (a quarter of the process group's timeout), and every
    rank hears "still watching" between them: the watch's 30 s add up across the calls."""
    path = tmp_path / "lease"
    other = held_by_another_machine(path)
    clock = FakeClock()
    mine = observer(path, clock)
    outcomes = [mine.acquire(budget=10.0) for _ in range(3)]
    assert outcomes == [False, False, True] and clock.now == 30.0  # 10 + 10 + 10: the TTL, not 3 TTLs
    mine.release()
    other._create()  # a live run on node-b again
    clock2 = FakeClock()
    again = observer(path, clock2)
    assert again.acquire(budget=10.0) is False
    other.renew()  # it refreshed between two slices
    with pytest.raises(LeaseHeld):
        again.acquire(budget=10.0)


def test_a_filesystem_without_hard_links_takes_the_lease_by_an_exclusive_create(tmp_path, monkeypatch):
    def no_links(src, dst):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(run_lease.os, "link", no_links)
    path = tmp_path / "lease"
    lease = RunLease(path)
    assert lease.acquire() is True
    try:
        assert Holder.parse(path.read_bytes()).pid == os.getpid()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["lease"]  # no temporary left
        with pytest.raises(LeaseHeld):
            RunLease(path, me=OTHER, clock=FakeClock(), sleep=lambda s: lease.renew()).acquire()
    finally:
        lease.release()
