"""Exact rollbacks on DDP-2 (gloo), the bad batch on one rank only: the ranks agree and equal the
run that never saw the skipped batches. The one-process properties: tests/test_rollback_exact.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from jobs import PRELOAD, clean_env

import script_server

SCRIPT = Path(__file__).with_name("rollback_script.py")


@pytest.mark.slow
def test_ddp_ranks_roll_back_to_the_run_without_the_window(tmp_path):
    # forked from a server that imported torch and surge, as are the ranks its fits start
    # (tests/harness/script_server.py), instead of new interpreters that import them again
    proc = script_server.run(
        sys.executable, [str(SCRIPT), str(tmp_path / "job"), str(tmp_path / "out.pt")],
        cwd=tmp_path, env=clean_env(), preload=PRELOAD, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = torch.load(tmp_path / "out.pt", weights_only=True)
    assert len(report) == 3
    assert report == {name: (1, []) for name in report}
