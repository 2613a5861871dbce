"""Exact rollbacks on DDP-2 (gloo), the bad batch on one rank only: the ranks agree and equal the
run that never saw the skipped batches. The one-process properties: tests/test_rollback_exact.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from jobs import clean_env

SCRIPT = Path(__file__).with_name("rollback_script.py")


@pytest.mark.slow
def test_ddp_ranks_roll_back_to_the_run_without_the_window(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "job"), str(tmp_path / "out.pt")],
        env=clean_env(), capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = torch.load(tmp_path / "out.pt", weights_only=True)
    assert len(report) == 3
    assert report == {name: (1, []) for name in report}
