"""`lightning.pytorch.strategies` objects under Lightning and under `surge run`
(scripts/strategy_objects.py): `DDPStrategy(find_unused_parameters=True)` on two gloo processes,
`SingleDeviceStrategy()` and `DDPStrategy(...)` on one; what `trainer.strategy` answers on every
rank (ranks, devices, `reduce`/`broadcast`/`all_gather`/`reduce_boolean_decision`, the wrapped
model), the metrics and the final weights (`torch.equal`). FSDP: Lightning 2.6's `FSDPStrategy`
refuses the CPU ("requires a GPU accelerator"), so scripts/fsdp_mapping.py compares the mapping
with surge's native FSDP2 strategy given the arguments it promises, under `surge run` only."""

from __future__ import annotations

import pytest
from oracle_runs import assert_same_weights, run, run_both


@pytest.fixture(scope="module")
def ddp2(tmp_path_factory):
    return run_both("strategy_objects.py", tmp_path_factory.mktemp("ddp2"), "ddp2", timeout=600)


@pytest.fixture(scope="module")
def one(tmp_path_factory):
    return run_both("strategy_objects.py", tmp_path_factory.mktemp("one"), "one", timeout=600)


def test_two_processes_answer_as_lightning(ddp2):
    lightning, surge = ddp2
    members = lightning.record["ddp2/members"]
    assert [m["global_rank"] for m in members] == [0, 1]  # the record holds both ranks
    assert members[0]["mean"] == [1.5, 1.0] and members[0]["model"] == "DistributedDataParallel"
    assert members[1]["broadcast"] == {"from": 1, "items": [1, "x"]}
    assert surge.record == lightning.record


def test_two_processes_train_the_same_weights(ddp2):
    lightning, surge = ddp2
    assert_same_weights(lightning.weights("ddp2"), surge.weights("ddp2"))


def test_trainer_strategy_is_the_object_given(ddp2, one):
    for run_ in (*ddp2, *one):
        assert all(v for k, v in run_.record.items() if k.endswith("same_object")), run_.framework


def test_one_process_answers_and_trains_as_lightning(one):
    lightning, surge = one
    assert lightning.record["single/members"][0]["model"] == "Model"
    assert lightning.record["ddp1/members"][0]["gathered"] == [[0, 0]]  # stacked, even for one
    assert surge.record == lightning.record
    for name in ("single", "ddp1"):
        assert_same_weights(lightning.weights(name), surge.weights(name))


def test_fsdp_strategy_maps_onto_surges_fsdp(tmp_path):
    result = run("surge", "fsdp_mapping.py", tmp_path, timeout=600)
    mapped = result.record["lightning_fsdp/mapped"]
    assert mapped == {
        "shard": ["Block"], "reshard_after_forward": False, "cpu_offload": False, "checkpointing": ["Block"],
    }  # fmt: skip
    assert result.record["lightning_fsdp/metrics"] == result.record["native_fsdp/metrics"]
    assert_same_weights(result.weights("lightning_fsdp"), result.weights("native_fsdp"))
