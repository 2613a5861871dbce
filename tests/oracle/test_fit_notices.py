"""What a fit says where it trains nothing or not as asked, under `surge run` as under Lightning
(tests/oracle/scripts/fit_notices.py): "`Trainer.fit` stopped: ..." at the end of every fit
(`max_epochs=0` too), fp16 asked for on the CPU warned about and run as bf16-mixed, a
`training_step` that returns None warned about once; the same steps and weights."""

from __future__ import annotations

import pytest
from oracle_runs import assert_same_weights, run_both

RUNS = ("epochs0", "steps0", "complete", "fp16", "no_return")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return run_both("fit_notices.py", tmp_path_factory.mktemp("fit_notices"))


@pytest.mark.parametrize("run", RUNS)
def test_what_a_fit_says_and_does_matches_lightning(runs, run):
    lightning, surge = runs
    for key in ("stopped", "precision", "global_step"):
        assert surge.record[f"{run}/{key}"] == lightning.record[f"{run}/{key}"], key
    theirs, ours = lightning.record[f"{run}/warnings"], surge.record[f"{run}/warnings"]
    assert len(ours) == len(theirs) and all(o.startswith(t) for o, t in zip(ours, theirs)), (ours, theirs)
    assert_same_weights(lightning.weights(run), surge.weights(run))


def test_the_messages_are_the_ones_meant(runs):
    """Lightning's behaviour the comparison relies on, so a changed script cannot pass vacuously."""
    record = runs[0].record
    assert record["epochs0/stopped"] == ["`Trainer.fit` stopped: `max_epochs=0` reached."]
    assert record["steps0/stopped"] == ["`Trainer.fit` stopped: `max_steps=0` reached."]
    assert record["complete/stopped"] == ["`Trainer.fit` stopped: `max_epochs=2` reached."]
    assert record["fp16/precision"] == "bf16-mixed" and "bf16-mixed" in record["fp16/warnings"][0]
    assert len(record["no_return/warnings"]) == 1 and record["no_return/global_step"] == 8
