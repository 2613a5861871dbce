"""SIGTERM/SIGINT mid-run: checkpoint at a step boundary, exit 143/130, resume to the same weights."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).with_name("preempt_script.py")
SRC = Path(__file__).resolve().parents[2] / "src"


def _start(root: Path, out: Path, marker: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.Popen([sys.executable, str(SCRIPT), str(root), str(out), str(marker)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip


def _wait_for(marker: Path, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not marker.exists():
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "the run never reached step 5"
        time.sleep(0.02)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_saves_at_a_step_boundary_and_resume_matches(tmp_path, sig, code):
    full = _start(tmp_path / "full", tmp_path / "full.pt", tmp_path / "m0")
    stopped = _start(tmp_path / "run", tmp_path / "run.pt", tmp_path / "m1")
    _wait_for(tmp_path / "m1", stopped)
    stopped.send_signal(sig)
    output = stopped.communicate(timeout=60)[0]
    assert stopped.returncode == code, output
    assert "saved" in output and not (tmp_path / "run.pt").exists()
    ckpts = list((tmp_path / "run").rglob("last.ckpt"))
    assert len(ckpts) == 1
    step = torch.load(ckpts[0], weights_only=True)["global_step"]
    assert 5 <= step < 90
    resumed = _start(tmp_path / "run", tmp_path / "run.pt", tmp_path / "m2")  # ckpt_path="auto" finds it
    assert resumed.wait(timeout=120) == 0, resumed.stdout.read()
    assert full.wait(timeout=120) == 0, full.stdout.read()
    a, b = torch.load(tmp_path / "full.pt"), torch.load(tmp_path / "run.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)
