"""What the distributed tests share: a clean environment for a job, free ports, reference runs, the comparisons."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch

import script_server
from ports import free_port  # noqa: F401 - the tests' ports, from here as before
from shared_runs import shared_run

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"
TRAIN_SCRIPT = HERE / "train_script.py"
MULTINODE_SCRIPT = HERE / "multinode_script.py"
PRELOAD = ("torch", "surge")  # what a job's first process imports, once: tests/harness/script_server.py

# What a launcher (torchrun, surge, SLURM) sets: none of it may leak from the test into a job.
_LAUNCH_VARS = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK", "ROLE_RANK",
    "ROLE_WORLD_SIZE", "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SURGE_LAUNCHED",
)  # fmt: skip
_LAUNCH_PREFIXES = ("SLURM_", "SLURMD_", "SBATCH_", "SRUN_", "SALLOC_", "TORCHELASTIC_", "TORCH_ELASTIC_")


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without any launcher's variables, with surge's sources importable."""
    env = {
        k: v for k, v in os.environ.items() if k not in _LAUNCH_VARS and not k.startswith(_LAUNCH_PREFIXES)
    }
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p)
    env["OMP_NUM_THREADS"] = "1"  # two cores: ranks must not fight over threads
    env.update(extra or {})
    return env


def job_args(tmp_path: Path, name: str, *args: str) -> tuple[list[str], Path]:
    """`--root`/`--out` for a train_script.py-style job named `name`, and where its result lands."""
    out = tmp_path / f"{name}.pt"
    return ["--root", str(tmp_path / name), "--out", str(out), *args], out


def single_process(tmp_path: Path, name: str, *args: str, timeout: float = 180) -> dict:
    """train_script.py in one plain process (no launcher): the reference the distributed runs must match."""
    argv, out = job_args(tmp_path, name, "--devices", "1", *args)
    proc = script_server.run(
        sys.executable,
        [str(TRAIN_SCRIPT), *argv],
        cwd=tmp_path,
        env=clean_env(),
        preload=PRELOAD,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return torch.load(out, weights_only=True)


def reference_run(tmp_path_factory: pytest.TempPathFactory, *args: str) -> dict:
    """`single_process(..., *args)` made once a test session, whichever test or worker asks first."""
    return shared_run(
        tmp_path_factory, "train_script", args, lambda folder: single_process(folder, "one", *args)
    )


def run_group(commands: Sequence[Sequence[str]], *, env: Mapping[str, str], cwd: Path, timeout: float):
    """Run the commands concurrently, each in its own session; returns [(returncode, output)].

    A command of this interpreter (`sys.executable ...`: torchrun, `surge launch`, a script) is forked
    from a script server that imported torch and surge, and so are the ranks it starts of the same
    script (tests/harness/script_server.py); any other command runs as it is, its output to a file (a
    full pipe would block a command while the test waits on another). Whatever is still running at
    the end is killed with its whole process tree (an agent's workers included), so a hung rendezvous
    fails the test instead of leaving processes behind.
    """
    procs = [_start(cmd, env, cwd, cwd / f"command{i}.log") for i, cmd in enumerate(commands)]
    timed_out = False
    try:
        deadline = time.monotonic() + timeout
        for proc, _ in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
                break
    finally:
        for proc, _ in procs:
            kill_group(proc)
    outputs = [_output(proc, log) for proc, log in procs]
    if timed_out:
        raise AssertionError(f"timed out after {timeout} s:\n" + "\n-----\n".join(o[-3000:] for o in outputs))
    return [(proc.returncode, out) for (proc, _), out in zip(procs, outputs)]


def _start(cmd: Sequence[str], env: Mapping[str, str], cwd: Path, log: Path) -> tuple[Any, Path | None]:
    if cmd[0] == sys.executable:
        return script_server.start(sys.executable, list(cmd[1:]), cwd=cwd, env=env, preload=PRELOAD), None
    with open(log, "w") as f:
        proc = subprocess.Popen(
            list(cmd), env=dict(env), cwd=cwd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
    return proc, log


def _output(proc: Any, log: Path | None) -> str:
    return log.read_text() if log is not None else proc.stdout + proc.stderr


def kill_group(proc: subprocess.Popen) -> None:
    """Kill `proc`, its process group and every process below it.

    torchrun starts its workers in sessions of their own, so killing the agent's group alone would
    orphan them (and a worker stuck in a rendezvous waits for 30 minutes): the tree is walked first.
    """
    below = []
    if proc.poll() is None:  # not reaped yet, so the pid is still this process's
        with contextlib.suppress(psutil.NoSuchProcess):
            below = psutil.Process(proc.pid).children(recursive=True)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for child in below:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    proc.wait()
    psutil.wait_procs(below, timeout=5)


def assert_same_weights(a: dict, b: dict, tol: float = 1e-5) -> None:
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=tol, rtol=tol)
