"""torchmetrics under DDP: a logged Metric's epoch value is computed over every rank's samples once."""

from __future__ import annotations

import sys

import pytest
import torch
from jobs import HERE, PRELOAD, clean_env

import script_server

SCRIPT = HERE / "metrics_script.py"


def run(tmp_path, devices: int) -> list[dict]:
    out = tmp_path / f"ws{devices}"
    argv = [str(SCRIPT), "--devices", str(devices), "--out", str(out)]
    # rank zero is forked from a server that imported torch and surge (its launcher's ranks too)
    proc = script_server.run(
        sys.executable, argv, cwd=tmp_path, env=clean_env(), preload=PRELOAD, timeout=120
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [torch.load(out / f"rank{r}.pt", weights_only=True) for r in range(devices)]


def test_two_ranks_agree_with_one_process_and_with_torchmetrics(tmp_path):
    sys.path.insert(0, str(HERE))
    from metrics_script import Scored, dataset

    x, y = dataset().tensors
    expected = Scored().f1(Scored()(x), y).item()  # the whole dataset in one update
    (one,) = run(tmp_path, 1)
    rank0, rank1 = run(tmp_path, 2)
    assert rank0["world_size"] == rank1["world_size"] == 2
    for res in (one, rank0, rank1):
        for key in ("first", "again"):  # a second validation starts from a reset metric
            assert res[key]["val_f1"] == pytest.approx(expected, abs=1e-6)
            assert res[key]["val_seen"] == 30.0  # each sample counted once: no double reduction
    assert rank0["first"] == rank1["first"]
