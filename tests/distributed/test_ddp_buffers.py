"""DDP's buffers in validation inside fit: every rank validates with rank 0's (the checkpoint's),
as DDP's own forward broadcasts them, and as Lightning (which runs validation through it) does."""

from __future__ import annotations

import sys

import torch
from jobs import HERE, PRELOAD, clean_env

import script_server

SCRIPT = HERE / "buffers_script.py"


def run(tmp_path, *args: str) -> list[dict]:
    out = tmp_path / "out"
    argv = [str(SCRIPT), "--out", str(out), *args]
    proc = script_server.run(
        sys.executable, argv, cwd=tmp_path, env=clean_env(), preload=PRELOAD, timeout=120
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [torch.load(out / f"rank{r}.pt", weights_only=True) for r in range(2)]


def test_every_rank_validates_with_rank_zeros_batchnorm_statistics(tmp_path):
    rank0, rank1 = run(tmp_path)
    # the sanity check's batch, then 3 epochs of one validation batch per rank
    assert len(rank0["seen"]) == len(rank1["seen"]) == 4
    for ours, theirs in zip(rank0["seen"], rank1["seen"], strict=True):
        assert torch.equal(ours["mean"], theirs["mean"]) and torch.equal(ours["var"], theirs["var"])
    # what the last validation ran with is what rank 0 (which writes checkpoints) ends with
    assert torch.equal(rank0["seen"][-1]["mean"], rank0["final"]["mean"])


def test_without_broadcast_buffers_each_rank_keeps_its_own(tmp_path):
    """`DDPStrategy(broadcast_buffers=False)`: nothing is broadcast, as with DDP's own forward; and
    the ranks' own statistics differ (they train on different batches), so the test above can fail."""
    rank0, rank1 = run(tmp_path, "--broadcast-buffers", "0")
    later = zip(rank0["seen"][1:], rank1["seen"][1:], strict=True)  # the sanity check's: still equal
    assert all(not torch.equal(ours["mean"], theirs["mean"]) for ours, theirs in later)
