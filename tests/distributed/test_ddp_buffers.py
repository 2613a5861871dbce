"""DDP's buffers in validation inside fit: every rank validates with rank 0's (the checkpoint's),
as DDP's own forward broadcasts them, and as Lightning (which runs validation through it) does."""

from __future__ import annotations

import sys

import torch
from jobs import HERE, PRELOAD, clean_env

import script_server

SCRIPT = HERE / "buffers_script.py"


def run(tmp_path, *args: str) -> list[dict]:
    tmp_path.mkdir(parents=True, exist_ok=True)
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


def test_validation_holds_the_checkpoints_statistics_and_a_resume_validates_the_same(tmp_path):
    """Each epoch's validation, on every rank, runs with the buffers that epoch's checkpoint holds
    (rank 0's); a fit resumed from a mid-epoch checkpoint validates as the uninterrupted one."""
    ckpts = tmp_path / "ckpts"
    whole = run(tmp_path / "whole", "--ckpt-dir", str(ckpts))
    for epoch in range(3):
        state = torch.load(ckpts / f"epoch={epoch}-step={8 * (epoch + 1)}.ckpt", weights_only=True)[
            "state_dict"
        ]
        for rank in whole:
            seen = rank["seen"][1 + epoch]  # after the sanity check's
            assert torch.equal(seen["mean"], state["net.1.running_mean"])
            assert torch.equal(seen["var"], state["net.1.running_var"])
    resumed = run(tmp_path / "resumed", "--resume", str(ckpts / "epoch=0-step=4.ckpt"))
    for ours, theirs in zip(resumed, whole, strict=True):
        for a, b in zip(ours["seen"][-3:], theirs["seen"][-3:], strict=True):  # the 3 epochs' validations
            assert all(torch.equal(a[k], b[k]) for k in ("mean", "var", "loss"))
        assert all(torch.equal(ours["params"][k], theirs["params"][k]) for k in theirs["params"])


def test_manual_optimization_trains_in_step_and_each_rank_keeps_its_statistics(tmp_path):
    """Manual optimization under plain DDP: the step's `manual_backward` arms DDP's reducer; DDP's
    forward used to arm it again as the step returned, and the second step failed ("initialize_buckets
    must NOT be called during autograd execution"). As under Lightning, such a forward asks for no
    broadcast: each rank validates with its own statistics."""
    rank0, rank1 = run(tmp_path, "--manual", "1")
    assert all(torch.equal(rank0["params"][k], rank1["params"][k]) for k in rank0["params"])  # averaged
    later = zip(rank0["seen"][1:], rank1["seen"][1:], strict=True)  # the sanity check's: still equal
    assert all(not torch.equal(ours["mean"], theirs["mean"]) for ours, theirs in later)
