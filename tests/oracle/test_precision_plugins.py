"""Lightning's precision plugins called directly (and `SingleDeviceStrategy(precision_plugin=...)
.tensor_init_context(empty_init=...)`) answer as Lightning's, and a "-true" fit creates
`configure_model`'s layers in its dtype (scripts/precision_plugins.py): every recorded value equal
under both, the weights `torch.equal`. FSDP's `mixed_precision_config` under "-mixed" is surge's
(gradients reduced in fp32), so only the "-true" configs are compared."""

from __future__ import annotations

import pytest
from oracle_runs import assert_same_weights, run_both


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return run_both("precision_plugins.py", tmp_path_factory.mktemp("precision"), timeout=600)


def test_plugin_methods_answer_as_lightning(runs):
    lightning, surge = runs
    theirs = {k: v for k, v in lightning.record.items() if k.startswith("plugins/")}
    assert theirs["plugins/bf16-true"]["init_layer"] == "torch.bfloat16"
    assert theirs["plugins/bf16-mixed"]["forward_autocast"] is True
    assert theirs["plugins/64/complex"] == "torch.complex64" and theirs["plugins/fused"] is True
    assert theirs["plugins/fsdp/16-mixed"]["scaler"] == "ShardedGradScaler"
    drawn, skipped = theirs["plugins/strategy/16-true/False"], theirs["plugins/strategy/16-true/True"]
    assert drawn[0] == "torch.float16" and drawn[2] != skipped[2]  # empty_init skips the init's draws
    for key, value in theirs.items():
        assert surge.record.get(key) == value, key


@pytest.mark.parametrize("scenario", ["fit64", "fitbf16"])
def test_true_precision_fits_create_layers_in_their_dtype(runs, scenario):
    lightning, surge = runs
    theirs = {k: v for k, v in lightning.record.items() if k.startswith(f"{scenario}/")}
    assert theirs[f"{scenario}/in_configure_model"] == (
        "torch.float64" if scenario == "fit64" else "torch.bfloat16"
    )
    assert {k: surge.record.get(k) for k in theirs} == theirs
    assert_same_weights(lightning.weights(scenario), surge.weights(scenario))
