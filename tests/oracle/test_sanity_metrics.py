"""The sanity check's logged values as each hook around it sees them, against real Lightning
(`scripts/sanity_metrics.py`): `callback_metrics`, `logged_metrics` and `progress_bar_metrics` at
the sanity check's start and end, at every validation hook (each batch's end included: its step
values show there), at the first training hooks, and in a test after the fit."""

from __future__ import annotations

import json

import pytest
from oracle_runs import run_both

SCENARIOS = {
    "plain": {},
    "callback_validation_epoch_end": {"epoch_end_hook": True},
    "module_validation_epoch_end": {"module_epoch_end": True},
    "step_values": {"step_values": True},
    "step_values_and_epoch_end": {"step_values": True, "epoch_end_hook": True},
    "no_sanity_check": {"trainer": {"num_sanity_val_steps": 0}},
    "two_loaders": {"two_loaders": True, "step_values": True},
    "test_after_fit": {"step_values": True, "test": True},
    "two_loaders_epoch_end_hooks": {"two_loaders": True, "epoch_end_hook": True, "module_epoch_end": True},
    "two_loaders_test": {"two_loaders": True, "test": True},
    "all_sanity_batches": {
        "step_values": True,
        "epoch_end_hook": True,
        "trainer": {"num_sanity_val_steps": -1},
    },
}


@pytest.mark.parametrize("scenario", list(SCENARIOS.values()), ids=list(SCENARIOS))
def test_the_sanity_checks_values_are_lightnings_at_every_hook(tmp_path, scenario):
    lightning, surge = run_both("sanity_metrics.py", tmp_path, json.dumps(scenario))
    theirs, ours = lightning.record["seen"], surge.record["seen"]
    assert [s["at"] for s in ours] == [s["at"] for s in theirs]
    for mine, real in zip(ours, theirs, strict=True):
        assert mine == real, mine["at"]
