"""Lightning's module defaults as a module sees them, compared with real Lightning
(tests/oracle/scripts/stage_defaults.py): the default `configure_gradient_clipping` calls an overridden
`clip_gradients` at every step, with or without clipping; `zero_grad()` runs at each stage's start,
so gradients set before `validate()`/`test()` are gone in the first step; `setup`/`teardown` get a
`TrainerFn`; `trainer.gradient_clip_algorithm` is a `GradClipAlgorithmType` (any case accepted)."""

from __future__ import annotations

import pytest
from oracle_runs import assert_same_weights, run_both

RUNS = ("no_clip", "clip_value")
KEYS = ("clip", "zero_grad", "setup", "teardown", "grads", "algorithm")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return run_both("stage_defaults.py", tmp_path_factory.mktemp("stage_defaults"))


@pytest.mark.parametrize("run", RUNS)
def test_module_defaults_match_lightning(runs, run):
    lightning, surge = runs
    for key in KEYS:
        assert surge.record.get(f"{run}/{key}") == lightning.record.get(f"{run}/{key}"), key
    assert_same_weights(lightning.weights(run), surge.weights(run))


def test_an_epoch_mean_matches_lightning_to_the_last_bit(runs):
    """Each step's `value * batch_size` rounded, then summed (not a fused multiply-add): the same
    float32 mean as Lightning's, not just close."""
    lightning, surge = runs
    assert surge.record["mean_bits/result"] == lightning.record["mean_bits/result"]


def test_the_points_are_the_ones_meant(runs):
    """What the comparison relies on in Lightning's record, so a changed script cannot pass vacuously."""
    record = runs[0].record
    assert [c[1] for c in record["no_clip/clip"]] == [None, None, None]  # called at each of the 3 steps
    assert record["clip_value/algorithm"] == ["GradClipAlgorithmType", "value"]
    assert ["validation_step", [True, True]] in record["no_clip/grads"]
    assert ["test_step", [True, True]] in record["no_clip/grads"]
    assert record["no_clip/setup"][0] == ["TrainerFn", "fit"]
