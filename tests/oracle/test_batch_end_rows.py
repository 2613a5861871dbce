"""Values logged in `on_train_batch_end` and the training rows the CSVLogger writes, against real
Lightning (`scripts/batch_end_rows.py`): a log interval's row holds what the batch's end hooks log,
and a resume from a checkpoint saved inside those hooks (ModelCheckpoint(every_n_train_steps=N))
keeps the rows the first fit wrote up to it."""

from __future__ import annotations

import json

import pytest
from oracle_runs import run_both

# Resumed from a checkpoint that ModelCheckpoint saved in on_train_batch_end at a log interval's
# batch, before the module's own on_train_batch_end logged "mod" for that step.
RESUMES = {
    "at_step_15": {"ckpt": "epoch=1-step=15.ckpt", "before": 15},
    "at_step_9": {"ckpt": "epoch=1-step=9.ckpt", "before": 9},
}


@pytest.mark.parametrize("case", list(RESUMES.values()), ids=list(RESUMES))
def test_resume_keeps_the_rows_before_its_checkpoint(tmp_path, case):
    """Lightning's first fit writes the row of step 14 (or 8) with the "mod" value the module's
    on_train_batch_end logged at that batch (surge's first fit is the same). Lightning's resumed run
    starts a new metrics.csv (by design, surge continues the same file), so what is compared is that
    surge's file after the resume still holds the first fit's rows for the steps before the
    checkpoint, as Lightning's first fit wrote them: the row carried in the checkpoint was taken
    while the hooks ran (before the module's hook), and the resume writes it in place of the row."""
    scenario = {
        "cb": {},
        "mod": {},
        "ckpt_every": 3,
        "resume": case["ckpt"],
        "trainer": {"log_every_n_steps": 3},
    }
    lightning, surge = run_both("batch_end_rows.py", tmp_path, json.dumps(scenario), timeout=300)
    theirs = lightning.record["first fit's rows"]
    assert surge.record["first fit's rows"] == theirs  # the first fit: the same rows

    def before(rows):
        return [r for r in rows if int(r["step"]) < case["before"]]

    assert before(theirs)
    assert before(surge.record["csv/version_0/metrics.csv"]) == before(theirs)


SCENARIOS = {
    "every_step": {"cb": {}, "mod": {}, "trainer": {"log_every_n_steps": 1}},
    "epoch_values": {"cb": {"on_step": True, "on_epoch": True, "prog_bar": True}, "mod": {"on_epoch": True}},
    "accumulation": {"cb": {"on_epoch": True}, "mod": {}, "trainer": {"accumulate_grad_batches": 2}},
    "some_batches": {"cb": {"at": [1, 4]}, "mod": {"at": [0, 5], "on_epoch": True}, "trainer": {"log_every_n_steps": 3}},
    "step_key": {"cb": {}, "step_key": True},
    "manual": {"cb": {"on_epoch": True}, "mod": {}, "manual": True},
    "val_check_interval": {"cb": {"prog_bar": True}, "mod": {}, "trainer": {"val_check_interval": 2}},
    "max_steps": {"cb": {"on_epoch": True}, "mod": {}, "trainer": {"max_steps": 5, "log_every_n_steps": 1}},
    "checkpoint_every_3": {"cb": {}, "mod": {}, "ckpt_every": 3, "trainer": {"log_every_n_steps": 3}},
}  # fmt: skip


@pytest.mark.parametrize("scenario", list(SCENARIOS.values()), ids=list(SCENARIOS))
def test_batch_end_values_are_in_their_rows(tmp_path, scenario):
    """The CSV rows and, at each batch hook and epoch end, callback_metrics, logged_metrics and the
    progress bar: the same as Lightning's."""
    lightning, surge = run_both("batch_end_rows.py", tmp_path, json.dumps(scenario), timeout=300)
    assert lightning.record["csv/version_0/metrics.csv"]
    assert surge.record == lightning.record
