"""`logged_metrics` and `progress_bar_metrics` against real Lightning: the keys each `self.log`
combination gives (evaluation step values included), their values and types, during training and
after fit, validate and test; and `self.log`'s refusals of values Lightning cannot log."""

import pytest
from oracle_runs import run_both

CASES = ["None", "dict", "list", "nested", "nowhere", "str", "suffix", "vector"]


def ordered(value):
    """`value` with every dict as a list of its items: equal only in the same key order (what
    `print(trainer.callback_metrics)` shows)."""
    if isinstance(value, dict):
        return [(k, ordered(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [ordered(v) for v in value]
    return value


@pytest.mark.parametrize("mode", ["epochs", "fast_dev_run"])
def test_logged_and_progress_bar_metrics_match_lightning(tmp_path, mode):
    lightning, surge = run_both("logged_keys.py", tmp_path, *(["fast_dev_run"] if mode != "epochs" else []))
    assert surge.record == lightning.record
    assert ordered(surge.record) == ordered(lightning.record)  # the keys in Lightning's order too
    after_fit = lightning.record["after_fit"]
    assert "val_both_step" in after_fit["logged"]  # the evaluation's latest step value
    assert "train_quiet_step" not in after_fit["logged"]  # logger=False
    assert all(kind == "float" for kind, _ in after_fit["bar"].values())


def test_log_refusals_match_lightning(tmp_path):
    """Every `except`/`pytest.raises` that catches Lightning's error catches surge's (surge's
    MisconfigurationError is also a ValueError), with the same message."""
    lightning, surge = run_both("log_refusals.py", tmp_path)
    assert sorted(surge.record) == sorted(lightning.record) == sorted(CASES)
    for case, (caught_by, message) in lightning.record.items():
        assert set(caught_by) <= set(surge.record[case][0]), case
        assert surge.record[case][1] == message, case
    assert (
        lightning.record["None"][1]
        == "`self.log(foo, None)` was called, but `NoneType` values cannot be logged"
    )


def test_progress_bar_get_metrics_matches_lightning(tmp_path):
    lightning, surge = run_both("progress_bar_items.py", tmp_path)
    assert surge.record == lightning.record
    assert sorted(lightning.record["train_end"]) == ["epoch_sum", "loss", "seen"]


def test_logging_from_callbacks_matches_lightning(tmp_path):
    lightning, surge = run_both("callback_logging.py", tmp_path)
    assert surge.record == lightning.record
    assert ordered(surge.record) == ordered(lightning.record)
    assert lightning.record["after_fit"]["callback"]["at_train_start"] == 1.0  # kept into the first epoch
    assert "at_val_batch_end" in lightning.record["after_validate"]["bar"]
