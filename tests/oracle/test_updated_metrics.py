"""A torchmetrics object that only `update()`d on a batch, logged with `on_step=True`, under
`surge run`: its step value is left out and its epoch value logged, as Lightning does
(`Semantics.uncalled_metric_step`; surge's own API refuses it, tests/test_torchmetrics_logging.py)."""

from __future__ import annotations

from oracle_runs import run_both


def test_updated_only_metrics_log_their_epoch_value_as_lightning_does(tmp_path):
    lightning, surge = run_both("updated_metrics.py", tmp_path)
    assert "valid_acc_epoch" in lightning.record["callback_metrics"]
    assert "train_acc" not in lightning.record["callback_metrics"]  # step only: nothing to log
    assert surge.record == lightning.record
