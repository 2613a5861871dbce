"""Trainer flags as Lightning users observe them: the info lines for a limit of 1 or 1.0, the batch
counts a fit reports, and overfit_batches' reading of the loaders."""

from __future__ import annotations

import logging

import pytest

from surge import Trainer


def said(caplog: pytest.LogCaptureFixture, **kwargs: object) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="surge"):
        Trainer(logger=False, enable_progress_bar=False, **kwargs)  # type: ignore[arg-type]
    return [r.getMessage() for r in caplog.records if "was configured" in r.getMessage()]


def test_an_explicit_one_says_how_it_is_read(caplog):
    assert said(caplog, limit_train_batches=1) == [
        "`Trainer(limit_train_batches=1)` was configured so 1 batch per epoch will be used."
    ]
    assert said(caplog, limit_val_batches=1.0) == [
        "`Trainer(limit_val_batches=1.0)` was configured so 100% of the batches will be used."
    ]
    assert said(caplog, val_check_interval=1) == [
        "`Trainer(val_check_interval=1)` was configured so validation will run after every batch."
    ]
    assert said(caplog, limit_test_batches=2, limit_predict_batches=0.5) == []
    assert said(caplog) == []  # the defaults are not "given"


def test_fast_dev_run_and_overfit_batches_replace_the_limits_they_set(caplog):
    # overfit_batches sets the train/val limits: only it is said; fast_dev_run sets all of them.
    assert said(caplog, overfit_batches=1, limit_train_batches=1, limit_test_batches=1) == [
        "`Trainer(overfit_batches=1)` was configured so 1 batch will be used.",
        "`Trainer(limit_test_batches=1)` was configured so 1 batch will be used.",
    ]
    assert said(caplog, fast_dev_run=True, limit_test_batches=1, overfit_batches=1.0) == [
        "`Trainer(overfit_batches=1.0)` was configured so 100% of the batches will be used."
    ]
