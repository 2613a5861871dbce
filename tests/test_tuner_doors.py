"""One default per tuner argument, whichever door a user comes through: surge's functions
(`surge.tune.lr_find`, `surge.tune.find_batch_size`), its callbacks (`LearningRateFinder`,
`BatchSizeFinder`) and Lightning's (`Tuner.lr_find`, `Tuner.scale_batch_size`, the Lightning
mode's `LearningRateFinder`). The search itself lives in `surge.tune`, below the callbacks."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import surge.callbacks as callbacks
import surge.tune as tune
from surge.lightning.lr_finder import LearningRateFinder as LightningLearningRateFinder
from surge.lightning.tuner import Tuner

# canonical argument -> {door: that door's name for it}
LR_DOORS = {
    "surge.tune.lr_find": (tune.lr_find, {"num_training": "num_training"}),
    "surge.callbacks.LearningRateFinder": (
        callbacks.LearningRateFinder,
        {"num_training": "num_training_steps"},
    ),
    "Tuner.lr_find": (Tuner.lr_find, {"num_training": "num_training"}),
    "lightning LearningRateFinder": (LightningLearningRateFinder, {"num_training": "num_training_steps"}),
}
LR_ARGS = ("min_lr", "max_lr", "num_training", "mode", "early_stop_threshold")
BATCH_DOORS = {
    "surge.tune.find_batch_size": (
        tune.find_batch_size,
        {"init_val": "init", "steps_per_trial": "steps", "max_val": "max_batch_size"},
    ),
    "surge.callbacks.BatchSizeFinder": (callbacks.BatchSizeFinder, {}),
    "Tuner.scale_batch_size": (Tuner.scale_batch_size, {}),
}
BATCH_ARGS = ("init_val", "max_trials", "steps_per_trial", "max_val")


def _defaults(fn, names: dict[str, str], args: tuple[str, ...]) -> dict[str, object]:
    params = inspect.signature(fn).parameters
    return {arg: params[names.get(arg, arg)].default for arg in args}


LIGHTNINGS = {  # Lightning 2.6.6's defaults, which every door takes
    "lr_find": {
        "min_lr": 1e-8,
        "max_lr": 1,
        "num_training": 100,
        "mode": "exponential",
        "early_stop_threshold": 4.0,
    },
    "batch_size": {"init_val": 2, "max_trials": 25, "steps_per_trial": 3, "max_val": 8192},
}


@pytest.mark.parametrize(
    "doors, args, tuner", [(LR_DOORS, LR_ARGS, "lr_find"), (BATCH_DOORS, BATCH_ARGS, "batch_size")]
)
def test_every_door_has_the_same_defaults(doors, args, tuner):
    seen = {door: _defaults(fn, names, args) for door, (fn, names) in doors.items()}
    first = next(iter(seen.values()))
    differing = {door: d for door, d in seen.items() if d != first}
    assert not differing, f"defaults differ between doors: {seen}"
    assert first == LIGHTNINGS[tuner]


def test_the_tuner_package_imports_nothing_from_the_callbacks():
    tune_dir = Path(tune.__file__).parent
    reaching = []
    for path in tune_dir.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and "callbacks" in node.module.split("."):
                reaching.append(f"{path.name}: from {'.' * node.level}{node.module}")
    assert not reaching


def test_the_batch_size_search_steps_are_the_tuners():
    """The callback's power/binsearch steps and surge's own search sit in surge.tune."""
    from surge.callbacks import batch_size_finder

    assert batch_size_finder.search_batch_size.__module__ == "surge.tune.batch_size_search"
    assert not (Path(callbacks.__file__).parent / "batch_size_search.py").exists()
