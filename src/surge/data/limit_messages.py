"""Lightning's info lines for a batch limit given as exactly 1 or 1.0: an int and a float mean
different things (one batch, all of them), so the reading chosen is said, as Lightning says it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..rank_zero import info

# What `1` and `1.0` mean for each argument (Lightning's wording).
_ONE = {
    "limit_train_batches": "1 batch per epoch will be used.",
    "val_check_interval": "validation will run after every batch.",
}
_ALL = {
    "limit_train_batches": "100% of the batches per epoch will be used",
    "val_check_interval": "validation will run at the end of the training epoch",
}


def say_explicit_limits(args: Mapping[str, Any]) -> None:
    """Say how an explicit 1 or 1.0 is read, for the arguments the run uses as given (the Trainer's
    arguments `args`): none of the limits under fast_dev_run, not the train/val limits under
    overfit_batches (it sets them), overfit_batches itself always."""
    names = ["overfit_batches"]
    if not args.get("fast_dev_run"):
        if not args.get("overfit_batches"):
            names += ["limit_train_batches", "limit_val_batches"]
        names += ["limit_test_batches", "limit_predict_batches", "val_check_interval"]
    for name in names:
        value = args.get(name)
        if isinstance(value, bool):
            continue
        if isinstance(value, int) and value == 1:
            info(f"`Trainer({name}=1)` was configured so {_ONE.get(name, '1 batch will be used.')}")
        elif isinstance(value, float) and value == 1.0:
            info(
                f"`Trainer({name}=1.0)` was configured so {_ALL.get(name, '100% of the batches will be used')}."
            )
