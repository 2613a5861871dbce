"""Lightning's `ModelParallelStrategy` (tensor parallel x FSDP2 on a 2 x 2 mesh of 4 gloo processes)
under Lightning 2.6.6 and under `surge run` (scripts/model_parallel.py): the same mesh and sampler
coordinates on every rank, the same training, the same gathered weights (`torch.equal`).

One deliberate difference: surge reduces logged metrics over the data-parallel group, Lightning
over every process. Means agree (to the last bit or two: the sums run in another order); a sum
counts each sample once under surge, once per tensor-parallel rank under Lightning."""

from __future__ import annotations

import pytest
from oracle_runs import assert_same_weights, run_both

pytestmark = pytest.mark.slow  # 4 processes per framework on 2 cores


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return run_both("model_parallel.py", tmp_path_factory.mktemp("mp"), timeout=600)


def test_the_mesh_and_the_samplers_data_parallel_coordinates_are_lightnings(runs):
    lightning, surge = runs
    ranks = lightning.record["ranks"]
    assert [r["sampler"] for r in ranks] == [
        {"num_replicas": 2, "rank": 0}, {"num_replicas": 2, "rank": 0},
        {"num_replicas": 2, "rank": 1}, {"num_replicas": 2, "rank": 1},
    ]  # fmt: skip
    assert ranks[0]["mesh"] == [["data_parallel", "tensor_parallel"], [2, 2]]
    assert surge.record["ranks"] == ranks


def test_training_and_gathered_weights_are_lightnings(runs):
    lightning, surge = runs
    assert surge.record["global_step"] == lightning.record["global_step"] == 8
    assert_same_weights(lightning.weights("model_parallel"), surge.weights("model_parallel"))


def test_metrics_are_reduced_over_the_data_parallel_group(runs):
    lightning, surge = runs
    ours, theirs = surge.record["metrics"], lightning.record["metrics"]
    assert ours["seen"] == 64.0 and theirs["seen"] == 128.0  # 64 samples an epoch; Lightning counts 2x
    assert ours["train_loss"] == pytest.approx(theirs["train_loss"], rel=1e-6, abs=0)
    assert ours["val_loss"] == pytest.approx(theirs["val_loss"], rel=1e-6, abs=0)
