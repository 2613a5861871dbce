"""The differential harness: one script, run unmodified under real Lightning (the oracle's own
virtual environment) and under `surge run`, each in a directory of its own; what each run records
(`record.py`) comes back as a dict for the test to compare.

A script records through `record.py` (its own directory is on `sys.path` under both frameworks):
`record.put(key, value)` adds JSON-able values; `record.weights(name, module)` saves a state dict
(`torch.equal` is compared, not a tolerance); the record is written when the script exits."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from oracle_env import lightning_python

import script_server
from ports import free_port

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE / "scripts"
SRC = HERE.parents[1] / "src"
FRAMEWORKS = ("lightning", "surge")


@dataclass
class Run:
    """One framework's run of a script: its record, its directory, its output."""

    framework: str
    cwd: Path
    record: dict[str, Any]
    output: str
    returncode: int = 0
    stdout: str = ""

    def weights(self, name: str) -> dict[str, torch.Tensor]:
        return torch.load(self.cwd / "weights" / f"{name}.pt", weights_only=True)

    def files(self, under: str = ".") -> list[str]:
        """Files under `under` (relative to the run's directory), sorted, the record's own left out."""
        root = self.cwd / under
        found = (p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
        return sorted(f for f in found if not f.startswith(("weights/", "record.json")))


# What a run imports before its script: a server of the framework's interpreter that has imported
# them forks each run (tests/harness/script_server.py), so runs do not import them again.
PRELOAD = {"lightning": ("torch", "lightning.pytorch"), "surge": ("torch", "surge", "surge.lightning")}


def command(framework: str, script: Path, args: tuple[str, ...]) -> list[str]:
    if framework == "lightning":
        return [str(lightning_python()), str(script), *args]
    return [sys.executable, "-m", "surge.lightning", str(script), *args]


def run(
    framework: str,
    script: str | Path,
    tmp_path: Path,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    check: bool = True,
) -> Run:
    """Run `script` (a name in scripts/ or a path) under one framework in `tmp_path/framework`."""
    path = Path(script) if Path(script).is_absolute() else SCRIPTS / script
    cwd = tmp_path / framework
    cwd.mkdir(parents=True, exist_ok=True)
    python, *argv = command(framework, path, args)
    for attempt in (1, 2):
        proc = script_server.run(
            python, argv, cwd=cwd, env=_env(framework, cwd, env), preload=PRELOAD[framework], timeout=timeout
        )
        output = proc.stdout + proc.stderr
        if attempt == 2 or framework != "lightning" or not oracle_flaked(proc.returncode, output):
            break
        shutil.rmtree(cwd)  # the oracle's second run starts from the same empty directory as its first
        cwd.mkdir(parents=True)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{path.name} failed under {framework} (exit {proc.returncode}):\n{output[-6000:]}"
        )
    record_file = cwd / "record.json"
    record = json.loads(record_file.read_text()) if record_file.exists() else {}
    return Run(framework, cwd, record, output, proc.returncode, proc.stdout)


# Failures of the oracle's own runs that no surge code takes part in, each seen in CI under load:
# - torch's C++ runtime ending a process with a thread still running (std::terminate, then SIGABRT):
#   real Lightning's `ddp_spawn` ranks do this now and then as they end, after the script's work;
# - Lightning's AsyncCheckpointIO removing a top-k file while its queued background write of that
#   file still runs: the write's commit then fails with FileNotFoundError, raised at the next save.
TEARDOWN_CRASH = "terminate called without an active exception"
ASYNC_REMOVAL_RACE = ("lightning/pytorch/plugins/io/async_plugin.py", "FileNotFoundError")


def oracle_flaked(returncode: int, output: str) -> bool:
    """Whether the oracle's run failed only by one of the races above, which reruns it once.

    Only Lightning's runs are rerun, and only for these: the oracle is the reference, not what is
    tested, and its process runs no surge code. A surge run that fails fails its test."""
    if returncode == 0:
        return False
    return TEARDOWN_CRASH in output or all(part in output for part in ASYNC_REMOVAL_RACE)


def _env(framework: str, cwd: Path, env: dict[str, str] | None) -> dict[str, str]:
    full_env = {
        **os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(SRC)]), "OMP_NUM_THREADS": "1",
        "ORACLE_DIR": str(cwd), "ORACLE_FRAMEWORK": framework, "PYTHONHASHSEED": "0", **(env or {}),
    }  # fmt: skip
    for name in ("PL_GLOBAL_SEED", "PL_SEED_WORKERS", "LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_PORT"):
        if env is None or name not in env:
            full_env.pop(name, None)
    if "MASTER_PORT" not in full_env:  # the ranks a run starts meet on a port no other test is given
        full_env["MASTER_PORT"] = str(free_port())
    return full_env


def lightning_prints(code: str, *args: str) -> str:
    """What `python -c CODE ARGS` prints under real Lightning's interpreter (forked from the server
    that imported Lightning for the runs, instead of importing it again: 7 s of CPU)."""
    with tempfile.TemporaryDirectory() as folder:
        cwd = Path(folder)
        proc = script_server.run(
            str(lightning_python()), ["-c", code, *args], cwd=cwd, env=_env("lightning", cwd, None),
            preload=PRELOAD["lightning"], timeout=300,
        )  # fmt: skip
    if proc.returncode != 0:
        raise AssertionError(f"under Lightning (exit {proc.returncode}):\n{proc.stderr[-6000:]}")
    return proc.stdout


def run_both(script: str | Path, tmp_path: Path, *args: str, **kwargs: Any) -> tuple[Run, Run]:
    """(Lightning's run, surge's run) of the same script with the same arguments."""
    lightning, surge = (run(f, script, tmp_path, *args, **kwargs) for f in FRAMEWORKS)
    return lightning, surge


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys(), (sorted(a), sorted(b))
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, f"weights differ (not torch.equal): {different}"
