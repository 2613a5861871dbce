"""Steps and hooks set on the instance behave as in real Lightning (tests/oracle/scripts/instance_steps.py)."""

from __future__ import annotations

from oracle_runs import assert_same_weights, run_both


def test_steps_and_hooks_set_on_the_instance_match_lightning(tmp_path):
    lightning, surge = run_both("instance_steps.py", tmp_path)
    assert lightning.record["test"] == [{"t": 1.0}] and lightning.record["fit"][2] == 0.5
    assert lightning.record["events"] == ["on_train_epoch_end (instance)"]
    assert lightning.record["off"] == [[], 2]  # no val loader set up; both batches trained
    assert lightning.record["off_validate"] == "MisconfigurationException"
    assert surge.record == lightning.record
    assert_same_weights(lightning.weights("model"), surge.weights("model"))
