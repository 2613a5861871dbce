"""`self.log` in every hook of Lightning's table, from a module and from a callback, with the
default options and each `on_step`/`on_epoch` variant, against real Lightning
(`scripts/log_hooks.py`): where it is refused (the error and its words), where it is allowed, and
what `callback_metrics`, `logged_metrics`, the progress bar and the CSV rows hold after each stage."""

from __future__ import annotations

import json

import pytest
from oracle_runs import run_both

SCENARIOS = {
    "fit_then_evaluate_and_predict": {"stages": ["fit", "validate", "test", "predict"]},
    "resume": {"stages": ["fit", "resume"]},
    "exception": {"stages": ["fit"], "raise": True},
}
# Known, not yet fixed (docs/lightning.md names them)
GAPS = {
    "resume": "a callback's load_state_dict may log (Lightning refuses: not managed by the Trainer's "
    "control flow); the new logger gets the checkpoint step's rows again",
    "exception": "after a failed training step callback_metrics hold that step's values (Lightning: the "
    "step before's)",
}


@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(v, id=k, marks=[pytest.mark.xfail(strict=True, reason=GAPS[k])] if k in GAPS else [])
        for k, v in SCENARIOS.items()
    ],
)
def test_log_in_every_hook_is_lightnings(tmp_path, scenario):
    lightning, surge = run_both("log_hooks.py", tmp_path, json.dumps(scenario), timeout=300)
    theirs, ours = lightning.record, surge.record
    assert theirs
    assert outcomes(ours) == outcomes(theirs)  # per hook and variant: each distinct outcome, in order
    for key in sorted((theirs.keys() | ours.keys()) - {"order"}):
        assert without_known_gaps(ours.get(key)) == without_known_gaps(theirs.get(key)), key


def outcomes(record: dict) -> dict:
    """Per stage, what each call (hook and variant) came to; hooks are compared elsewhere for order."""
    found: dict = {}
    stage = None
    for entry in record.get("order", []):
        if len(entry) == 1:
            stage = entry[0]
        else:
            found.setdefault(stage, {})[entry[0]] = entry[1]
    return found


# Not yet the same (the refusals are; docs/lightning.md names it): a value logged in a callback's
# `state_dict` (during ModelCheckpoint's save in `on_train_epoch_end`) is dropped under surge.
KNOWN_GAPS = ("C_state_dict_",)


def without_known_gaps(value):
    if isinstance(value, dict):
        return {k: without_known_gaps(v) for k, v in value.items() if not any(g in k for g in KNOWN_GAPS)}
    if isinstance(value, list):
        return [without_known_gaps(v) for v in value]
    return value
