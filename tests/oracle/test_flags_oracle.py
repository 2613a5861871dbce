"""Trainer flags and datamodules compared with real Lightning: the batch counts a fit reports
(trainer and progress bar) under check_val_every_n_epoch, max_steps, overfit_batches and no
validation_step; a datamodule's text and `from_datasets`' arguments."""

from oracle_runs import assert_same_weights, run_both


def test_batch_counts_match_lightning(tmp_path):
    lightning, surge = run_both("batch_counts.py", tmp_path)
    assert lightning.record["every_2/totals"] == [[64, 0], [64, 2], [64, 0], [64, 2]]
    assert lightning.record["no_val_step/num_val_batches"] == []
    assert surge.record == lightning.record


def test_datamodule_text_and_from_datasets_match_lightning(tmp_path):
    lightning, surge = run_both("datamodule_text.py", tmp_path)
    assert lightning.record["named"] == [5, 4, 3]
    assert "size=NA" in lightning.record["BoringDataModuleNoLen/fit"]
    assert surge.record == lightning.record


def test_validation_counted_across_epochs_matches_lightning(tmp_path):
    lightning, surge = run_both("val_across_epochs.py", tmp_path)
    assert lightning.record["every_3/validated_after"] == [3, 6, 9, 12]
    assert lightning.record["every_5/validated_after"] == [5, 10]
    assert surge.record == lightning.record
    for run in ("every_3", "every_6_accumulating", "every_5"):
        assert_same_weights(lightning.weights(run), surge.weights(run))
