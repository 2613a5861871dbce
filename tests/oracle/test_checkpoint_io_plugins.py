"""`Trainer(plugins=[TorchCheckpointIO() | AsyncCheckpointIO() | a CheckpointIO of one's own])`
against Lightning (scripts/checkpoint_io_plugins.py, one run each): the same files with the same
epochs, steps and weights (torch.equal); the user's plugin gets the same saves, loads and removes."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from oracle_runs import assert_same_weights, run_both

DIRS = ("torch", "async", "custom", "resumed")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return run_both("checkpoint_io_plugins.py", tmp_path_factory.mktemp("io"))


def test_the_same_checkpoint_files_with_the_same_contents(runs):
    lightning, surge = runs
    for name in DIRS:
        files = (
            ["epoch=3-step=16.ckpt", "last.ckpt"]
            if name == "resumed"
            else ["epoch=2-step=12.ckpt", "last.ckpt"]
        )
        assert surge.record[f"{name}_files"] == files
        theirs = lightning.record[f"{name}_files"]
        if name == "async":
            # Lightning's AsyncCheckpointIO removes a file at once but writes in the background: on
            # a busy machine the removal of the older top-k file can come before its queued write,
            # which then leaves it behind (seen in CI, for each older file). surge waits for the write
            # before it removes.
            assert set(files) <= set(theirs) <= {*files, "epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt"}, theirs
        else:
            assert theirs == files
        assert lightning.record[f"{name}_step"] == surge.record[f"{name}_step"]
        assert_same_weights(lightning.weights(f"{name}_final"), surge.weights(f"{name}_final"))
        for file in files:
            assert lightning.record[f"{name}/{file}"] == surge.record[f"{name}/{file}"]
            assert_same_weights(lightning.weights(f"{name}_{file}"), surge.weights(f"{name}_{file}"))


def test_a_users_checkpoint_io_gets_lightnings_calls(runs):
    lightning, surge = runs
    calls = [[tuple(c) for c in run.record["custom_calls"]] for run in runs]
    # The same saves (last.ckpt through the plugin too, not a link) and the resume's load, in order...
    assert [c for c in calls[0] if c[0] != "remove"] == [c for c in calls[1] if c[0] != "remove"]
    assert ("load", "last.ckpt") in calls[1] and all(c[2] is None for c in calls[1] if c[0] == "save")
    # ...and the same removals; surge's come after the new last.ckpt is written (docs/lightning.md).
    assert Counter(c for c in calls[0] if c[0] == "remove") == Counter(
        c for c in calls[1] if c[0] == "remove"
    )


def test_surges_writers_keep_their_digest_a_users_io_writes_its_own_files(runs):
    from surge.checkpoint import _digest_record, load_checkpoint

    _, surge = runs
    for name in ("torch", "async"):  # surge's writer: a digest record, verified on reading
        path = surge.cwd / name / "last.ckpt"
        assert _digest_record(path) is not None
        assert torch.equal(
            load_checkpoint(path)["state_dict"]["layer.weight"],
            surge.weights(f"{name}_last.ckpt")["layer.weight"],
        )
    assert _digest_record(surge.cwd / "custom" / "last.ckpt") is None  # plain torch.save: the plugin's


def test_async_checkpoint_io_called_directly_saves_a_snapshot(runs):
    lightning, surge = runs
    assert lightning.record["direct"][0] == 0.0 and lightning.record["fabric_io_is_pytorch_io"] is True
    for key in ("direct", "fabric_io_is_pytorch_io"):
        assert surge.record[key] == lightning.record[key], key
