"""The metrics.csv and hparams.yaml a script's CSVLogger writes are Lightning's, byte for byte:
one row per logger call (step values at `log_every_n_steps`, epoch means, each evaluation batch's
step values, LearningRateMonitor's rows without an epoch, under Lightning's names), sorted columns,
Lightning's step for each row, float32 values. The project scripts (test_projects.py) check the same on whole projects."""

from oracle_runs import run_both


def test_every_kind_of_row_is_lightnings(tmp_path):
    lightning, surge = run_both("logging_rows.py", tmp_path)
    run = "logs/version_0"
    theirs = (lightning.cwd / run / "metrics.csv").read_text()
    for column in ("val_batch_loss/dataloader_idx_1", "test_loss_step", "warmup/body-momentum", "warmup/pg2"):
        assert column in theirs.splitlines()[0]  # rows of each kind
    assert (surge.cwd / run / "metrics.csv").read_text() == theirs
    assert (surge.cwd / run / "hparams.yaml").read_text() == (
        lightning.cwd / run / "hparams.yaml"
    ).read_text()
    assert surge.record == lightning.record
