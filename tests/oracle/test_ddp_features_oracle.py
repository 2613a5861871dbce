"""Cross-rank features under DDP against real Lightning: `scripts/ddp_features.py` on two CPU
processes (gradient clipping, schedulers, early stopping, top-k checkpoints, learning-rate
monitoring, synced logging, all_gather, predict, stopping limits), then every rank's record,
metrics.csv row for row, the checkpoint files and the final weights compared (exact)."""

from __future__ import annotations

import json

import pytest
from oracle_runs import run_both
from test_ddp_buffers_oracle import assert_same_ranks
from test_projects import checkpoints

pytestmark = pytest.mark.slow

SCENARIOS = {
    "plain": {},
    "clip_norm": {"trainer": {"gradient_clip_val": 0.05}},
    "clip_value": {"trainer": {"gradient_clip_val": 0.01, "gradient_clip_algorithm": "value"}},
    "clip_norm_accumulate": {"trainer": {"gradient_clip_val": 0.05, "accumulate_grad_batches": 2}},
    "clip_value_accumulate": {
        "trainer": {
            "gradient_clip_val": 0.01,
            "gradient_clip_algorithm": "value",
            "accumulate_grad_batches": 2,
        }
    },
    # (the logging, checkpoint and scheduler features below add to a fit independently, each with
    # records and files of its own: merged in pairs, as each scenario starts two ranks under both
    # frameworks; mid_epoch_val_plateau_top_k combines them all too)
    "step_lr_sync_dist_logging": {"sched": "step", "lr_monitor": "epoch", "sync_log": True},
    "plateau_top_k_checkpoints": {
        "sched": "plateau",
        "lr_monitor": "epoch",
        "topk": True,
        "trainer": {"max_epochs": 6},
    },
    "early_stopping": {"early_stop": 1, "lr": 0.5, "trainer": {"max_epochs": 10}},
    "lr_monitor_step": {"sched": "step", "lr_monitor": "step", "trainer": {"max_epochs": 2}},
    # (one run for three features that add to a plain fit, each with records of its own: every scenario
    # starts two ranks under both frameworks)
    "validation_epoch_end_logging_all_gather_predict": {
        "epoch_end_log": True,
        "gather": True,
        "predict": True,
        "trainer": {"max_epochs": 2},
    },
    "max_steps_mid_epoch": {"trainer": {"max_steps": 11}},
    "limit_train_batches_float": {"trainer": {"limit_train_batches": 0.5, "max_epochs": 3}},
    "mid_epoch_val_plateau_top_k": {
        "sync_log": True,
        "sched": "plateau",
        "topk": True,
        "lr_monitor": "step",
        "trainer": {"val_check_interval": 0.5, "max_epochs": 3, "log_every_n_steps": 2},
    },
    "accumulate_clip_max_steps_early_stop": {
        "sync_log": True,
        "early_stop": 0,
        "trainer": {
            "accumulate_grad_batches": 2,
            "gradient_clip_val": 0.05,
            "max_steps": 7,
            "log_every_n_steps": 3,
        },
    },
    "limits_accumulate_gather": {
        "sync_log": True,
        "epoch_end_log": True,
        "gather": True,
        "trainer": {
            "limit_val_batches": 0.5,
            "limit_train_batches": 0.75,
            "accumulate_grad_batches": 3,
            "max_epochs": 2,
        },
    },
    "val_every_3_steps_across_epochs": {
        "sched": "step",
        "lr_monitor": "step",
        "topk": True,
        "trainer": {"max_steps": 13, "val_check_interval": 3, "check_val_every_n_epoch": None},
    },
    "log_every_2_steps": {"sync_log": True, "trainer": {"log_every_n_steps": 3, "max_epochs": 2}},
}


@pytest.mark.parametrize("scenario", list(SCENARIOS.values()), ids=list(SCENARIOS))
def test_ddp_features_match_lightning(tmp_path, scenario):
    lightning, surge = run_both("ddp_features.py", tmp_path, json.dumps(scenario), timeout=300)
    records = sorted(p.name for p in lightning.cwd.glob("record*.json"))
    assert records == ["record-rank0.json", "record-rank1.json"]
    assert checkpoints(surge) == checkpoints(lightning)
    assert_same_ranks(lightning, surge, records)


def test_synced_step_values_between_logging_batches_are_the_last_logging_batchs(tmp_path):
    """The one difference docs/lightning.md names for `sync_dist=True` step values: surge reduces
    them over the ranks at each `log_every_n_steps` batch (one collective), Lightning at every
    batch. So between logging batches a callback's `callback_metrics` holds, in surge, the value of
    the last logging batch; at logging batches, and for values not synced, both hold the same."""
    scenario = {"sync_log": True, "batch_end": True, "trainer": {"log_every_n_steps": 3, "max_epochs": 1}}
    lightning, surge = run_both("ddp_features.py", tmp_path, json.dumps(scenario), timeout=300)
    synced = ("train_loss_step", "loss_max_step", "rank_sum")
    for rank in ("record-rank0.json", "record-rank1.json"):
        theirs = json.loads((lightning.cwd / rank).read_text())["batch_end"]
        ours = json.loads((surge.cwd / rank).read_text())["batch_end"]
        assert [b["step"] for b in ours] == [b["step"] for b in theirs] == list(range(1, 9))
        last_logged = None
        for mine, real in zip(ours, theirs, strict=True):
            assert mine["loss_own_step"] == real["loss_own_step"]  # not synced: the batch's own
            if mine["step"] % 3 == 0:  # a logging batch: reduced there, as Lightning's
                last_logged = real
                assert {k: mine[k] for k in synced} == {k: real[k] for k in synced}
            elif last_logged is None:  # before the first logging batch: not reduced yet
                assert not set(synced) & set(mine), mine
            else:
                assert {k: mine[k] for k in synced} == {k: last_logged[k] for k in synced}
                assert mine["train_loss_step"] != real["train_loss_step"]  # Lightning's is this batch's
