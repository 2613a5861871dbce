"""The claim on a checkpoint folder is a lease (src/surge/config/run_lease.py): refreshed while its
run lives, lapsed when it is gone, on whatever machine it ran. Before, a lock from another host name
counted as a live run forever, so a run killed -9 on one node blocked every requeue on another (and
every pod restarted under a new host name) until a person deleted it.

The clocks are injected: a watch "waits" by calling the test's `sleep`, which advances a fake clock
or makes the holder refresh, so what the watch sees is decided, never raced."""

from __future__ import annotations

import os
import shutil
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
sys.path.insert(0, sys.argv[3])
from helpers import TinyModel, fast_trainer, make_loaders
from surge.callbacks import Callback, ModelCheckpoint

class Hang(Callback):
    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if trainer.global_step == 2:  # its checkpoint at step 2 is written
            Path(sys.argv[2]).write_text("saved")
            time.sleep(3600)

cb = ModelCheckpoint(dirpath=sys.argv[1], every_n_train_steps=2, save_last=True)
fast_trainer(max_epochs=1, enable_checkpointing=True, callbacks=[cb, Hang()]).fit(TinyModel(), *make_loaders())
"""


def kill_9_after_its_first_checkpoint(directory: Path, tmp_path: Path) -> None:
    flag, tests = tmp_path / "flag", Path(__file__).resolve().parents[1]
    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(tests)])}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(directory), str(flag), str(tests)], env=env)
    try:
        deadline = time.monotonic() + 120
        while not flag.exists():
            assert holder.poll() is None and time.monotonic() < deadline, "the first run did not save"
            time.sleep(0.1)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert lock_file(directory, True).exists()  # the killed run's lease is left behind


def new_uts_namespace() -> bool:
    """Whether this test may run a process under another host name (`unshare -u`, as root)."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    return subprocess.run(["unshare", "-u", "hostname", "surge-probe"], capture_output=True).returncode == 0


RESUME = (
    "import sys, socket; sys.path.insert(0, sys.argv[2]);"
    "from surge.config import run_lease; run_lease.TTL_S = 0.5;"
    "from helpers import TinyModel, fast_trainer, make_loaders;"
    "from surge.callbacks import Callback, ModelCheckpoint;"
    "steps = [];"
    "Steps = type('Steps', (Callback,), dict(on_train_batch_start=lambda s, t, m, b, i: steps.append(t.global_step)));"
    "cb = ModelCheckpoint(dirpath=sys.argv[1], every_n_train_steps=2, save_last=True);"
    "t = fast_trainer(max_epochs=1, enable_checkpointing=True, callbacks=[cb, Steps()]);"
    "t.fit(TinyModel(), *make_loaders(), ckpt_path='auto');"
    "print('host', socket.gethostname(), 'steps', steps)"
)


def test_a_run_killed_9_on_one_host_resumes_on_another_by_itself(tmp_path, monkeypatch):
    """The requeue runs under a new host name: in a new UTS namespace where this test may make one
    (root), else with the host name injected. A dead run refreshes nothing, so the short TTL given
    to the requeue changes how long it watches, never what it sees."""
    directory = tmp_path / "ckpts"
    kill_9_after_its_first_checkpoint(directory, tmp_path)
    if new_uts_namespace():
        tests, src = Path(__file__).resolve().parents[1], Path(__file__).resolve().parents[2] / "src"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(tests)])}
        cmd = f'hostname requeued-node && exec "{sys.executable}" -c "{RESUME}" "{directory}" "{tests}"'
        done = subprocess.run(
            ["unshare", "-u", "sh", "-c", cmd], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert "host requeued-node steps [2, 3]" in done.stdout  # resumed from the killed run's step 2
    else:
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
