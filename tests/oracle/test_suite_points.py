"""Public behaviour that Lightning's own tests check, compared with Lightning 2.6.6 on one run of
tests/oracle/scripts/suite_points.py under each framework: `Trainer(barebones=True)`, `extract_batch_size`,
parameter tying, `isolate_rng`, `utilities.parsing`, `_restricted_classmethod`, the FSDP and model-parallel
strategies' attributes and messages, `StrategyRegistry`, `lightning_restore_optimizer`, the precision
plugins' loop-side methods, and a user class deriving from a stand-in with a metaclass of its own."""

from __future__ import annotations

import pytest
from oracle_runs import run_both


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return run_both("suite_points.py", tmp_path_factory.mktemp("suite_points"))


def test_every_recorded_behaviour_is_lightnings(runs):
    lightning, surge = runs
    different = {
        k: (lightning.record.get(k), surge.record.get(k)) for k in lightning.record.keys() | surge.record
    }
    assert {k: v for k, v in different.items() if v[0] != v[1]} == {}
    assert len(lightning.record) >= 40


def test_barebones_turns_everything_off_and_names_what_it_refuses(runs):
    lightning, _ = runs
    assert lightning.record["barebones/settings"] == [True, [], True, 0, 0]
    assert lightning.record["barebones/files"] == [] and lightning.record["barebones/metrics"] == {}
    assert lightning.record["barebones/log_warned"] is True
    assert all(v[0] == "error" for k, v in lightning.record.items() if k.startswith("barebones/refuses/"))


def test_strategy_hooks_and_registry_are_honoured(runs):
    lightning, _ = runs
    assert (
        lightning.record["restore_optimizer/True"] is True
        and lightning.record["restore_optimizer/False"] is False
    )
    assert lightning.record["registry/trainer"] == "DDPStrategy"
    assert (
        lightning.record["fsdp/storage"][0] == "TypeError"
        and lightning.record["model_parallel/mesh"][0] == "RuntimeError"
    )
