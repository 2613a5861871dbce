"""After a stage whose ranks started inside it (`strategy="ddp_spawn"`, `"ddp_fork"`), the main
process sees what real Lightning's does (tests/oracle/scripts/spawn_strategies.py)."""

from __future__ import annotations

import pytest
from oracle_runs import assert_same_weights, run_both

POINTS = ("ddp_fork/fit", "ddp_fork/validate", "ddp_fork/test", "ddp_spawn/fit")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return run_both("spawn_strategies.py", tmp_path_factory.mktemp("spawn_strategies"), timeout=400)


@pytest.mark.slow  # spawn starts 2 new interpreters under each framework
@pytest.mark.parametrize("point", POINTS)
def test_the_main_process_sees_what_lightnings_sees(runs, point):
    lightning, surge = runs
    for key in ("state", "steps", "best"):
        assert surge.record[f"{point}/{key}"] == lightning.record[f"{point}/{key}"], key
    ours, theirs = surge.record[f"{point}/callback_metrics"], lightning.record[f"{point}/callback_metrics"]
    assert ours.keys() == theirs.keys() and ours == pytest.approx(theirs, rel=1e-6)
    ours, theirs = surge.record[f"{point}/result"], lightning.record[f"{point}/result"]
    assert (ours is None) == (theirs is None)
    if theirs is not None:
        assert [r.keys() for r in ours] == [r.keys() for r in theirs]
        assert [pytest.approx(r, rel=1e-6) for r in theirs] == ours


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp_fork", "ddp_spawn"])
def test_the_main_process_holds_rank_zeros_trained_weights(runs, strategy):
    lightning, surge = runs
    assert_same_weights(lightning.weights(f"{strategy}_fit"), surge.weights(f"{strategy}_fit"))
    assert (
        surge.record[f"{strategy}/module_is_model"] is lightning.record[f"{strategy}/module_is_model"] is True
    )


def test_the_points_are_the_ones_meant(runs):
    """Lightning's behaviour the comparison relies on: counters stay at zero in the main process,
    callback_metrics are merged over stages, the state is the stage's finished one."""
    record = runs[0].record
    assert record["ddp_fork/fit/steps"] == [0, 0] and record["ddp_fork/fit/best"] == "epoch=1-step=16.ckpt"
    assert record["ddp_fork/test/state"] == ["TrainerStatus.FINISHED", "TrainerFn.TESTING", "None"]
    assert {"train_loss", "val_loss", "test_loss"} <= set(record["ddp_fork/test/callback_metrics"])
