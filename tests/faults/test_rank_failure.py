"""One rank raising ends the whole job quickly: no hang, a non-zero exit, no processes left."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "distributed"))
from jobs import TRAIN_SCRIPT, clean_env  # noqa: E402


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_one_rank_raising_ends_every_rank(tmp_path, rank):
    before = {p.pid for p in psutil.process_iter()}
    cmd = [sys.executable, str(TRAIN_SCRIPT), "--devices", "2", "--epochs", "50", "--root", str(tmp_path),
           "--out", str(tmp_path / "out.pt"), "--fail-rank", str(rank), "--fail-step", "3"]  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=60, cwd=tmp_path)
    elapsed = time.monotonic() - t0
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-2000:]
    assert elapsed < 30, f"took {elapsed:.0f} s"
    assert output.count(f"RuntimeError: boom on rank {rank} at step 3") == 1, output[-3000:]
    time.sleep(0.5)
    left = [
        p for p in psutil.process_iter(["pid", "cmdline"])
        if p.info["pid"] not in before and str(TRAIN_SCRIPT) in " ".join(p.info["cmdline"] or [])
    ]  # fmt: skip
    assert not left, f"orphaned ranks: {left}"
    assert not (tmp_path / "out.pt").exists()
