"""The oracle runner itself: the same script under real Lightning and under surge, compared."""

from oracle_runs import assert_same_weights, run_both


def test_boring_model_two_epochs_matches_lightning(tmp_path):
    lightning, surge = run_both("smoke_boring.py", tmp_path)
    assert lightning.record["global_step"] == 8
    assert surge.record == lightning.record
    assert_same_weights(lightning.weights("final"), surge.weights("final"))
