"""DDP's buffers (BatchNorm's running statistics, which each rank computes from its own batches)
against real Lightning: `scripts/ddp_buffers.py` on two CPU processes, each rank recording the
buffers it holds at the validation hooks and steps, and after each stage; then every rank's record,
metrics.csv row for row, and the final weights compared (exact)."""

from __future__ import annotations

import json

import pytest
from oracle_runs import Run, assert_same_weights, run_both
from test_projects import metrics_csv

pytestmark = pytest.mark.slow

SCENARIOS = {
    "mid_epoch_val": {"trainer": {"val_check_interval": 0.5}},
    "every_2nd_epoch": {"trainer": {"check_val_every_n_epoch": 2, "max_epochs": 4}},
    # lr 0: the window an epoch's end cuts is scaled differently (a deliberate difference,
    # docs/lightning.md); the running statistics still move with every batch
    "window_cut_by_epoch_end": {"trainer": {"accumulate_grad_batches": 3, "limit_train_batches": 5}, "lr": 0},
    # a validation inside an accumulation window: no broadcast (its forward ran under no_sync), and
    # its metrics.csv rows at the steps taken before it (one process too)
    "val_inside_a_window": {"trainer": {"accumulate_grad_batches": 3, "val_check_interval": 2}},
    "val_inside_a_window_one_process": {
        "trainer": {"accumulate_grad_batches": 3, "val_check_interval": 2, "devices": 1, "strategy": "auto"}
    },
    "val_inside_a_cut_window": {
        "trainer": {"accumulate_grad_batches": 4, "val_check_interval": 0.5},
        "lr": 0,
    },
    # the step's manual_backward arms DDP's reducer; DDP's forward asks for no broadcast
    "manual": {"manual": True},
    "no_sanity_check": {"trainer": {"num_sanity_val_steps": 0}},
    # 2 sanity batches given explicitly, Lightning's default: also the plain fit that validate() and
    # test() then follow (one run for both: each scenario starts two ranks under both frameworks)
    "sanity_check_2_validate_test_after_fit": {
        "trainer": {"num_sanity_val_steps": 2},
        "after": ["validate", "test"],
    },
    "no_validation": {"trainer": {"limit_val_batches": 0}},
    "two_val_loaders": {"two_vals": True},
    "no_broadcast_buffers": {"strategy": {"broadcast_buffers": False}},
    "find_unused": {"strategy": {"find_unused_parameters": True}},
    "spawn": {"strategy": "ddp_spawn"},
    # the last epoch validates not: rank 1 ends the fit with its own statistics
    "validate_test_after_fit_without_last_val": {
        "trainer": {"check_val_every_n_epoch": 2},
        "after": ["validate", "test"],
    },
    # Lightning broadcasts only through DDP's forward, inside fit: validate() and test() keep a
    # rank's own change made after their set-up (which synchronises the module's states)
    "own_change_after_setup": {
        "shift": ["on_validation_start", "on_test_start"],
        "after": ["validate", "test"],
        "trainer": {"max_epochs": 1},
    },
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_ddp_buffers_match_lightning(tmp_path, name):
    lightning, surge = run_both("ddp_buffers.py", tmp_path, json.dumps(SCENARIOS[name]), timeout=300)
    records = sorted(p.name for p in lightning.cwd.glob("record*.json"))  # per rank (ddp_spawn: and main's)
    assert "record-rank1.json" in records or "devices" in SCENARIOS[name].get("trainer", {})
    assert_same_ranks(lightning, surge, records)


def assert_same_ranks(lightning: Run, surge: Run, records: list[str]) -> None:
    """Every rank's record, every metrics.csv row for row, and the final weights: equal, exactly."""
    assert sorted(p.name for p in surge.cwd.glob("record*.json")) == records
    for record in records:
        theirs, ours = (json.loads((r.cwd / record).read_text()) for r in (lightning, surge))
        for key in sorted(theirs.keys() | ours.keys()):
            assert ours.get(key) == theirs.get(key), f"{record}: {key}"
    theirs_csv, ours_csv = metrics_csv(lightning), metrics_csv(surge)
    assert theirs_csv and ours_csv.keys() == theirs_csv.keys()
    for path, rows in theirs_csv.items():
        assert ours_csv[path] == rows, f"{path}:\nlightning {rows}\nsurge     {ours_csv[path]}"
    assert_same_weights(lightning.weights("final"), surge.weights("final"))
