"""`CombinedLoader` and a dict of train loaders under `surge run`, compared with Lightning on one
process and on two (gloo): the ids of the samples each step saw, per loader, with its `batch_idx`
and `dataloader_idx`, the batch counts, the loaders' shape, the metrics and the weights
(scripts/combined_loaders.py)."""

from __future__ import annotations

import json

import pytest
from oracle_runs import assert_same_weights, run_both

ONE = ("max_size", "dict", "min_size", "max_size_cycle", "limits")
DDP = ("max_size", "dict")


@pytest.fixture(scope="module")
def one(tmp_path_factory):
    return run_both("combined_loaders.py", tmp_path_factory.mktemp("one"))


@pytest.fixture(scope="module")
def ddp(tmp_path_factory):
    return run_both("combined_loaders.py", tmp_path_factory.mktemp("ddp"), "--ddp", timeout=600)


def test_one_process_matches_lightning(one):
    lightning, surge = one
    record = lightning.record
    assert record["max_size/train"][3][:2] == [0, 3] and record["max_size/train"][3][2]["a"] is None
    assert record["max_size/val"][2][:2] == [0, 1]  # the second val loader: dataloader_idx 1
    assert record["max_size_cycle/num_val_batches"] == [2, 3]  # one combined run, counted per loader
    assert record["limits/num_training_batches"] == 2  # 0.5: a 1 of 3 batches, b 2 of 5; the longest
    assert record["sequential/error"] is True
    assert surge.record == record
    for name in ONE:
        assert_same_weights(lightning.weights(name), surge.weights(name))


@pytest.mark.xdist_group("combined_loaders_ddp")
def test_two_processes_match_lightning(ddp):
    lightning, surge = ddp
    for rank in (0, 1):
        theirs, ours = (
            json.loads((r.cwd / f"record-rank{rank}.json").read_text()) for r in (lightning, surge)
        )
        assert theirs["max_size/num_training_batches"] == 3  # b: 20 samples, 10 a rank, 3 batches
        assert ours == theirs
    for name in DDP:
        assert_same_weights(lightning.weights(name), surge.weights(name))
