"""ModelCheckpoint, EarlyStopping and `callback_metrics` against real Lightning: the same scripts
under both frameworks write the same checkpoint files, say the same best/current/top-k values, stop
at the same epoch for the same reason, and end with torch.equal weights (in the best file too)."""

import math

import pytest
from oracle_runs import assert_same_weights, run_both


def same_runs(lightning, surge, weights):
    assert surge.record == lightning.record
    for name in weights:
        assert_same_weights(lightning.weights(name), surge.weights(name))


@pytest.mark.parametrize("case", ["step", "epoch", "val_loss", "stepwise", "logged"])
def test_model_checkpoint_top_k_matches_lightning(tmp_path, case):
    lightning, surge = run_both("checkpoint_topk.py", tmp_path, case)
    same_runs(lightning, surge, ["final", "best"])
    assert surge.files("ckpts") == lightning.files("ckpts")
    record = lightning.record
    kept = {f"ckpts/{name}" for name in record["files"] if name != "last.ckpt"}
    assert set(record["checkpoint"]["best_k_models"]) == kept and len(kept) == 2
    if case in ("stepwise", "logged"):
        # ranked by the loss of the step each file was saved at (not the last published value)
        losses = {step: loss for step, loss in record["train_losses"] if step % 2 == 0}
        best = min(losses, key=losses.__getitem__)
        assert record["best_global_step"] == best
        assert math.isclose(record["checkpoint"]["best_model_score"], losses[best], rel_tol=1e-6)


@pytest.mark.parametrize(
    "case",
    [
        "patience",
        "min_delta",
        "stopping_threshold",
        "divergence_threshold",
        "check_finite",
        "not_finite_ignored",
    ],
)
def test_early_stopping_matches_lightning(tmp_path, case):
    lightning, surge = run_both("early_stopping.py", tmp_path, case)
    same_runs(lightning, surge, ["final"])
    assert surge.files("ckpts") == lightning.files("ckpts")
    expected = {
        "patience": ("PATIENCE_EXHAUSTED", 5),
        "min_delta": ("PATIENCE_EXHAUSTED", 2),
        "stopping_threshold": ("STOPPING_THRESHOLD", 2),
        "divergence_threshold": ("DIVERGENCE_THRESHOLD", 2),
        "check_finite": ("NON_FINITE_METRIC", 1),
        "not_finite_ignored": ("PATIENCE_EXHAUSTED", 3),  # NaN counts as no improvement
    }[case]
    stopped = lightning.record["early_stopping"]
    assert (stopped["stopping_reason"], stopped["stopped_epoch"]) == expected


@pytest.mark.parametrize("where", ["dirpath", "default"])
def test_a_second_run_in_the_same_directory_matches_lightning(tmp_path, where):
    lightning, surge = run_both("checkpoint_again.py", tmp_path, where)
    same_runs(lightning, surge, ["first", "second"])
    assert "last-v1.ckpt" in lightning.record["second_files"]  # the second run's last, beside the first's


def test_callback_metrics_keys_match_lightning(tmp_path):
    lightning, surge = run_both("metric_keys.py", tmp_path)
    assert surge.record == lightning.record
    assert "val_both_step" not in lightning.record["after_fit"]  # evaluation step values never show


@pytest.mark.parametrize("validation", ["val", "noval"])
def test_a_monitor_never_logged_matches_lightning(tmp_path, validation):
    lightning, surge = run_both("checkpoint_missing.py", tmp_path, validation)
    assert surge.record == lightning.record
    assert lightning.record["raised"] is (True if validation == "val" else None)


def test_what_users_see_of_the_callbacks_matches_lightning(tmp_path):
    lightning, surge = run_both("checkpoint_surface.py", tmp_path)
    assert surge.record == lightning.record
    record = lightning.record
    assert record["state_keys"][0] == (
        "ModelCheckpoint{'monitor': 'val_loss', 'mode': 'min', 'every_n_train_steps': 0, 'every_n_epochs': 1, "
        "'train_time_interval': None}"
    )
    assert record["state_keys"][4] == "PatientStopping{'monitor': 'train_loss', 'mode': 'min'}"
    assert all(matched for _, matched in record["refused"]) and record["early_stopping_mode"]
    assert record["dirpaths"] == [["str", True]] * 3
    assert record["save_last_parsed"] == [True, False, "link"]
    assert record["last_is_link"] and record["last_points_to"] == "epoch=1-step=8.ckpt"
    assert record["moved_warning"] and record["checkpointing_off"]


@pytest.mark.parametrize("minimum", ["steps", "epochs", "both"])
def test_a_stop_before_the_minimums_matches_lightning(tmp_path, minimum):
    lightning, surge = run_both("stop_before_minimums.py", tmp_path, minimum)
    same_runs(lightning, surge, ["final"])
    record = lightning.record
    assert record["should_stop"] and record["resumed"].startswith(
        "You restored a checkpoint with current_epoch="
    )
    if minimum == "steps":  # ends inside the fourth epoch, once min_steps is reached; that epoch counts
        assert (record["global_step"], record["current_epoch"]) == (10, 4)
