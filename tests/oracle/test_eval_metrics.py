"""Evaluation metrics as a Lightning user observes them, against real Lightning
(`scripts/eval_metrics.py`): `callback_metrics`, `logged_metrics` and `progress_bar_metrics` at
every validation and test hook, in a fit (its sanity check too), in `validate()` and `test()`, on
one process and on two (DDP over gloo, every rank's record), with several loaders, torchmetrics
objects, `log_dict`, a callback that logs, and callbacks monitoring a loader's value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from oracle_runs import Run, run_both

SCENARIOS = {
    "validate_test_two_loaders": {
        "stages": ["validate", "test"], "loaders": 2, "own_name": True, "step_own": True,
        "module_epoch_end": True,
    },
    "validate_test_one_loader": {"stages": ["validate", "test"], "step_own": True, "module_epoch_end": True},
    "torchmetric_and_log_dict": {"stages": ["fit", "validate"], "torchmetric": True, "log_dict": True},
    "torchmetric_two_loaders": {"stages": ["validate"], "torchmetric": True, "loaders": 2},
    "callback_logs": {"stages": ["fit", "validate"], "callback_log": True},
    "callback_logs_two_loaders": {"stages": ["fit"], "callback_log": True, "loaders": 2},
    "mid_epoch_validation": {
        "step_own": True, "module_epoch_end": True,
        "trainer": {"val_check_interval": 0.5, "limit_train_batches": 4, "max_epochs": 2},
    },
    "second_loader_empty": {"stages": ["fit", "validate"], "loaders": 2, "empty_second": True, "step_own": True},
    "monitor_second_loader": {
        "loaders": 2, "monitor": "val_loss/dataloader_idx_1", "trainer": {"max_epochs": 3},
    },
    # (one DDP-2 fit of one loader, validated mid-epoch and at each epoch's end: ddp_fit and
    # ddp_fit_mid_epoch were two runs of it, the first without the mid-epoch validations)
    "ddp_fit_mid_epoch": {
        "ddp": True, "sync": True, "step_sync": True, "step_own": True, "module_epoch_end": True,
        "trainer": {"val_check_interval": 0.5, "limit_train_batches": 4},
    },
    # (one DDP-2 run for several features: each run starts 2 ranks under both frameworks)
    "ddp_two_loaders": {
        "ddp": True, "stages": ["fit", "validate", "test"], "loaders": 2, "sync": True, "step_sync": True,
        "step_own": True, "module_epoch_end": True, "callback_log": True, "log_points": True,
    },
    "first_loader_empty": {"stages": ["validate", "test"], "loaders": 2, "empty_first": True, "module_epoch_end": True},
    "extras_two_loaders": {
        "stages": ["fit", "validate"], "loaders": 2, "extras": True, "log_dict": True, "step_own": True,
        "trainer": {"num_sanity_val_steps": -1},
    },
    "ddp_torchmetrics_log_dict_two_loaders": {
        "ddp": True, "stages": ["fit", "validate", "test"], "torchmetric": True, "collection": True, "log_dict": True,
        "extras": True, "sync": True, "loaders": 2,
    },
    "ddp_mid_epoch_two_loaders_csv": {
        "ddp": True, "csv": True, "stages": ["fit", "validate"], "loaders": 2, "sync": True, "step_sync": True,
        "step_own": True, "module_epoch_end": True,
        "trainer": {"val_check_interval": 0.5, "limit_train_batches": 4, "max_epochs": 2},
    },
    "ddp_monitor_second_loader": {
        "ddp": True, "loaders": 2, "sync": True, "monitor": "val_loss/dataloader_idx_1", "trainer": {"max_epochs": 3},
    },
    "validation_every_other_epoch": {
        "step_own": True, "module_epoch_end": True, "callback_log": True,
        "trainer": {"check_val_every_n_epoch": 2, "max_epochs": 3},
    },
    "csv_two_loaders": {
        "csv": True, "stages": ["fit", "validate", "test"], "loaders": 2, "step_own": True, "extras": True,
        "module_epoch_end": True, "callback_log": True, "trainer": {"max_epochs": 2},
    },
    "module_logs_at_other_hooks": {"stages": ["fit", "validate"], "log_points": True, "step_own": True},
    "module_logs_at_other_hooks_two_loaders": {"stages": ["fit", "validate"], "log_points": True, "loaders": 2},
    "metric_collection_two_loaders": {"stages": ["fit", "validate"], "collection": True, "loaders": 2},
    "log_in_start_and_end_refused": {"stages": ["fit", "validate"], "log_refused": True},
    "ddp_all_sanity_batches_two_loaders": {
        "ddp": True, "loaders": 2, "sync": True, "step_sync": True, "callback_log": True,
        "trainer": {"num_sanity_val_steps": -1},
    },
    "one_val_batch_two_loaders_mid_epoch": {
        "loaders": 2, "step_own": True, "own_name": True, "module_epoch_end": True, "callback_log": True,
        "trainer": {"limit_val_batches": 1, "val_check_interval": 0.5, "limit_train_batches": 4, "max_epochs": 2},
    },
    "test_hooks_two_loaders_refusals": {"stages": ["test"], "loaders": 2, "log_points": True, "log_refused": True},
}  # fmt: skip


def records(run: Run) -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(Path(run.cwd).glob("record*.json"))}


@pytest.mark.parametrize("scenario", list(SCENARIOS.values()), ids=list(SCENARIOS))
def test_evaluation_metrics_are_lightnings_at_every_hook(tmp_path, scenario):
    lightning, surge = run_both("eval_metrics.py", tmp_path, json.dumps(scenario), timeout=300)
    theirs_all, ours_all = records(lightning), records(surge)
    assert sorted(ours_all) == sorted(theirs_all) != []
    for name, theirs in theirs_all.items():
        ours = ours_all[name]
        assert [s["at"] for s in ours["seen"]] == [s["at"] for s in theirs["seen"]], name
        for mine, real in zip(ours["seen"], theirs["seen"], strict=True):
            assert mine == real, (name, mine["at"])
        for key in sorted(theirs.keys() | ours.keys()):
            assert ours.get(key) == theirs.get(key), (name, key)
