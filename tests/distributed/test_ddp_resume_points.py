"""The resume-point property (tests/test_resume_points.py) on DDP-2: every save point, including one
inside an accumulation window (each rank's unsynchronised gradients are saved) and SIGTERM; and the
loaders of tests/faults/test_resume_loaders.py, stopped inside an epoch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from jobs import PRELOAD, clean_env

import script_server

SCRIPT = Path(__file__).with_name("resume_points_script.py")


def _run(tmp_path: Path, mode: str, timeout: float = 300) -> subprocess.CompletedProcess:
    argv = [str(SCRIPT), mode, str(tmp_path / "job"), str(tmp_path / f"{mode}.pt")]
    # rank zero is forked from a server that imported torch and surge (its launcher's rank too)
    return script_server.run(
        sys.executable, argv, cwd=tmp_path, env=clean_env(), preload=PRELOAD, timeout=timeout
    )


@pytest.mark.slow
def test_ddp_resumes_exactly_from_every_save_point(tmp_path):
    proc = _run(tmp_path, "points")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = torch.load(tmp_path / "points.pt", weights_only=True)
    assert out["steps"] == 3 * 3  # 7 batches a rank in windows of 3: 3 optimizer steps an epoch
    report = out["report"]
    assert {"hook:batch_end-e0-b1", "hook:batch_end-e1-b4", "hook:validation_end-e0", "after_fit"} <= set(
        report
    )
    assert sum(name.startswith("epoch_end:") for name in report) == 3
    assert {name: problems for name, problems in report.items() if problems} == {}

    signalled = _run(tmp_path, "sigterm")
    assert signalled.returncode == 143, signalled.stdout[-3000:] + signalled.stderr[-3000:]
    resumed = _run(tmp_path, "resume")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert torch.load(tmp_path / "resume.pt", weights_only=True)["report"] == {"sigterm": []}


@pytest.mark.slow
def test_ddp_resumes_the_loaders_users_write_exactly(tmp_path):
    script = Path(__file__).with_name("resume_loaders_script.py")
    # a new interpreter: its loaders' workers start by forkserver (as in test_stateful_data.py's DDP test)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "job"), str(tmp_path / "out.pt")],
        env=clean_env(), capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = torch.load(tmp_path / "out.pt", weights_only=True)
    assert set(report) == {"user_generator", "weighted_sampler", "python_random_sampler",
                           "worker_augmentation", "iterable", "persistent_workers"}  # fmt: skip
    assert {kind: diff for kind, diff in report.items() if diff} == {}
