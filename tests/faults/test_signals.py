"""SIGTERM/SIGINT mid-run: checkpoint at a step boundary, exit 143/130, resume to the same weights.

Sent to the pid, and to the whole process group as SLURM, container runtimes and Ctrl-C do; with
DataLoader workers (which must leave the signal to the main process), persistent or not.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from preempt_script import group_processes

import script_server

SCRIPT = Path(__file__).with_name("preempt_script.py")
SRC = Path(__file__).resolve().parents[2] / "src"


def _start(
    root: Path, out: Path, marker: Path, workers: int = 0, persistent: bool = False
) -> script_server.Started:
    """preempt_script.py, forked from a process that imported torch and surge (tests/harness/script_server.py),
    in a session of its own: a signal to its process group does not reach this test."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    args = [str(root), str(out), str(marker), str(workers), str(int(persistent))]
    return script_server.start(sys.executable, [str(SCRIPT), *args], cwd=root.parent, env=env,
                               preload=["torch", "surge"])  # fmt: skip


def _output(proc: script_server.Started) -> str:
    return proc.stdout + proc.stderr


def _wait_for(marker: Path, proc: script_server.Started, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not marker.exists():
        assert proc.poll() is None, _output(proc)
        assert time.monotonic() < deadline, "the run never reached step 5"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[bool, dict[str, torch.Tensor]]:
    """The weights of the runs that are never signalled, without and with persistent workers (other
    workers change nothing: the order is the sampler's; persistent workers draw their seed only once)."""
    tmp = tmp_path_factory.mktemp("full")
    runs = {
        p: _start(tmp / f"run{p}", tmp / f"full{p}.pt", tmp / f"marker{p}", 2 * p, p) for p in (False, True)
    }
    for proc in runs.values():
        assert proc.wait(timeout=180) == 0, _output(proc)
    return {p: torch.load(tmp / f"full{p}.pt") for p in runs}


@pytest.mark.parametrize(
    ("sig", "code", "workers", "persistent", "to_group"),
    [
        (signal.SIGTERM, 143, 0, False, False),
        (signal.SIGINT, 130, 0, False, False),
        (signal.SIGTERM, 143, 2, False, True),
        (signal.SIGINT, 130, 2, False, True),
        (signal.SIGTERM, 143, 2, True, True),
    ],
    ids=["term", "int", "term-group-2workers", "int-group-2workers", "term-group-2persistent"],
)
def test_signal_saves_at_a_step_boundary_and_resume_matches(
    tmp_path, uninterrupted, sig, code, workers, persistent, to_group
):
    stopped = _start(tmp_path / "run", tmp_path / "run.pt", tmp_path / "m1", workers, persistent)
    _wait_for(tmp_path / "m1", stopped)
    (os.killpg if to_group else os.kill)(stopped.pid, sig)
    stopped.wait(timeout=60)
    output = _output(stopped)
    assert stopped.returncode == code, output
    assert "saved" in output and "DataLoader worker" not in output
    assert not (tmp_path / "run.pt").exists()
    assert group_processes(stopped.pid) == []  # the workers were shut down, not orphaned
    ckpts = list((tmp_path / "run").rglob("last.ckpt"))
    assert len(ckpts) == 1
    step = torch.load(ckpts[0], weights_only=True)["global_step"]
    assert 5 <= step < 90
    # ckpt_path="auto" finds it
    resumed = _start(tmp_path / "run", tmp_path / "run.pt", tmp_path / "m2", workers, persistent)
    assert resumed.wait(timeout=120) == 0, _output(resumed)
    assert group_processes(resumed.pid) == []
    weights, reference = torch.load(tmp_path / "run.pt"), uninterrupted[persistent]
    assert all(torch.equal(reference[k], weights[k]) for k in reference)


def _record_pid(folder: Path, worker_id: int) -> None:
    (folder / f"worker{worker_id}").write_text(str(os.getpid()))


def test_workers_ignore_signals_from_others_obey_their_parent_and_run_the_users_init(tmp_path):
    from functools import partial

    from torch.utils.data import DataLoader, TensorDataset

    from surge.launch.signals import WorkerSignals

    loader = DataLoader(
        TensorDataset(torch.arange(8.0)),
        batch_size=2,
        num_workers=2,
        persistent_workers=True,
        worker_init_fn=WorkerSignals(partial(_record_pid, tmp_path)),
    )  # as the loader's preparation does
    assert loader.worker_init_fn.user_fn.func is _record_pid
    assert [b.tolist() for (b,) in loader] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    pids = [int((tmp_path / f"worker{i}").read_text()) for i in range(2)]  # the user's function ran
    for sig in ("TERM", "INT", "USR1"):  # from another process, as from SLURM or a terminal
        subprocess.run(["kill", f"-{sig}", *map(str, pids)], check=True)
    time.sleep(0.3)
    assert [b.tolist() for (b,) in loader] == [[0, 1], [2, 3], [4, 5], [6, 7]]  # the same workers
    os.kill(pids[0], signal.SIGTERM)  # from the parent, as the DataLoader's own shutdown sends it
    deadline = time.monotonic() + 10
    while os.waitid(os.P_PID, pids[0], os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        assert time.monotonic() < deadline, "the worker ignored its parent's SIGTERM"
        time.sleep(0.02)
    assert os.waitid(os.P_PID, pids[0], os.WEXITED | os.WNOHANG | os.WNOWAIT).si_status == 0
    del loader  # the DataLoader shuts down (and reaps) both
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


GLOBAL_PERSISTENT = """
import torch
from torch.utils.data import DataLoader, TensorDataset
from surge.launch.signals import WorkerSignals
loader = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=2, num_workers=2, persistent_workers=True,
                    worker_init_fn=WorkerSignals(None))
for _ in loader:
    pass
"""


def test_persistent_workers_alive_at_interpreter_exit_still_end(tmp_path):
    # multiprocessing ends them at exit with SIGTERM from the parent; ignoring it would hang here
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    done = script_server.run(sys.executable, ["-c", GLOBAL_PERSISTENT], cwd=tmp_path, env=env,
                             preload=["torch", "surge"], timeout=60)  # fmt: skip
    assert done.returncode == 0 and done.stderr == "", done.stderr
