"""`SpikeGuard` on DDP-2 (gloo): ranks agree on a spike only one of them saw, roll back together,
and equal the run that never saw the skipped batches; a checkpoint written between the spike and
the check resumes exactly. The one-process properties: tests/test_spike_guard.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from jobs import PRELOAD, clean_env

import script_server

SCRIPT = Path(__file__).with_name("spike_guard_script.py")


@pytest.mark.slow
def test_ddp_ranks_roll_back_together_to_the_run_without_the_window(tmp_path):
    # forked from a server that imported torch and surge, as are the ranks its fits start
    # (tests/harness/script_server.py), instead of new interpreters that import them again
    proc = script_server.run(
        sys.executable, [str(SCRIPT), str(tmp_path / "job"), str(tmp_path / "out.pt")],
        cwd=tmp_path, env=clean_env(), preload=PRELOAD, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = torch.load(tmp_path / "out.pt", weights_only=True)
    assert out["rollbacks"] == {"spike_on_rank_0": 1, "resumed": 1, "nan_on_rank_1": 1}
    assert out["steps"] == 24 - 4  # 24 batches a rank, 4 skipped
    assert out["report"] == {"spike_on_rank_0": [], "resumed": [], "nan_on_rank_1": []}
    said = proc.stderr.count("SpikeGuard: a loss spike between step 12 and 16")  # surge's messages
    assert said == 2  # by rank zero, in the spiked run and in the one resumed before the check
