"""`load_from_checkpoint` against real Lightning: a module whose layers are created in
`configure_model` loads (configure_model, then on_load_checkpoint, then the weights)."""

import pytest
from oracle_runs import assert_same_weights, run_both

pytestmark = pytest.mark.slow


def test_layers_created_in_configure_model_exist_before_the_weights_load(tmp_path):
    lightning, surge = run_both("configure_model_load.py", tmp_path)
    assert lightning.record["events"] == ["configure_model", "on_load_checkpoint"]
    assert lightning.record["weights_loaded_in_hook"] is False and lightning.record["same_prediction"] is True
    assert surge.record == lightning.record
    assert_same_weights(lightning.weights("loaded"), surge.weights("loaded"))
    assert_same_weights(lightning.weights("trained"), surge.weights("loaded"))
