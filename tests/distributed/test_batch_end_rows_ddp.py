"""On two ranks, what `on_train_batch_end` logs is in its own step's row, whether every rank logs it
(`sync_dist`: reduced) or rank zero alone (no collective that the other rank would never join); a
checkpoint saved in that hook carries the row as rank zero knows it then."""

from __future__ import annotations

import csv
import sys

import torch
from jobs import HERE, PRELOAD, clean_env

import script_server

SCRIPT = HERE / "batch_end_rows_ddp_script.py"


def test_batch_end_values_reach_their_own_rows_on_two_ranks(tmp_path):
    out = tmp_path / "out"
    # rank zero is forked from a server that imported torch and surge (its launcher's ranks too)
    proc = script_server.run(
        sys.executable, [str(SCRIPT), "--out", str(out)], cwd=tmp_path, env=clean_env(),
        preload=PRELOAD, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(out / "rows" / "version_0" / "metrics.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["end_rank_zero"]]
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4, 5, 6]
    for r in rows:
        step = int(r["step"])
        assert float(r["end_rank_zero"]) == step, r  # logged at the batch that wrote the row
        assert float(r["end_synced"]) == step + 0.5, r  # the mean over the two ranks, of this batch
        assert float(r["synced_rank"]) == 0.5, r
    for step in range(1, 7):  # saved after the callback logged: its own values, no synced one yet
        (path,) = (out / "ckpt").glob(f"*step={step}.ckpt")
        carried = torch.load(path, weights_only=True)["loggers"]
        assert carried["step"] == step
        (row,) = carried["rows"]
        assert row["end_rank_zero"] == step, row
        assert row["synced_rank"] == 0.5, row  # read at the interval, reduced on every rank
        assert "end_synced" not in row, row  # logged since: its reduction is not known on one rank
