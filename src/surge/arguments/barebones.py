"""Lightning's `Trainer(barebones=True)`: every feature that costs speed off (checkpointing, loggers,
the progress bar, step logging, the model summary, the sanity check), `self.log` a warning that does
nothing; asking for one of them with it, or for a development run, anomaly detection or a profiler,
is an error naming the argument, as in Lightning."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..errors import MisconfigurationError

# Opt-outs: the value barebones sets, and whether a given value asks for the feature (then refused).
_OFF: dict[str, tuple[Any, Any]] = {
    "enable_checkpointing": (False, bool),
    "logger": (False, lambda v: v is not None and v is not False),
    "enable_progress_bar": (False, bool),
    "log_every_n_steps": (0, lambda v: v is not None and v != 0),
    "enable_model_summary": (False, bool),
    "num_sanity_val_steps": (0, lambda v: v is not None and v != 0),
}
# Opt-ins that barebones cannot run with.
_ON: dict[str, Any] = {
    "fast_dev_run": lambda v: v is not False and v != 0,
    "detect_anomaly": bool,
    "profiler": lambda v: v is not None,
}
_WHY = {
    "enable_checkpointing": "Checkpointing can impact raw speed",
    "logger": "Logging can impact raw speed",
    "enable_progress_bar": "The progress bar can impact raw speed",
    "log_every_n_steps": "Logging can impact raw speed",
    "enable_model_summary": "Model summary can impact raw speed",
    "num_sanity_val_steps": "Sanity checking can impact raw speed",
    "fast_dev_run": "Development run is not meant for raw speed evaluation",
    "detect_anomaly": "Anomaly detection can impact raw speed",
    "profiler": "Profiling can impact raw speed",
}
DEACTIVATED = (
    " - Checkpointing: `Trainer(enable_checkpointing=True)`",
    " - Progress bar: `Trainer(enable_progress_bar=True)`",
    " - Model summary: `Trainer(enable_model_summary=True)`",
    " - Logging: `Trainer(logger=True)`, `Trainer(log_every_n_steps>0)`,"
    " `LightningModule.log(...)`, `LightningModule.log_dict(...)`",
    " - Sanity checking: `Trainer(num_sanity_val_steps>0)`",
    " - Development run: `Trainer(fast_dev_run=True)`",
    " - Anomaly detection: `Trainer(detect_anomaly=True)`",
    " - Profiling: `Trainer(profiler=...)`",
)
STARTED = (
    "`Trainer(barebones=True)` started running. The progress bar is disabled so you might want to"
    " manually print the progress in your model."
)


def barebones_arguments(args: Mapping[str, Any]) -> dict[str, Any]:
    """The Trainer's arguments as `barebones=True` makes them (unchanged without it); a feature
    asked for explicitly raises, naming it."""
    out = dict(args)
    if out.get("barebones") is not True:
        return out
    for name, asks in [*((n, a) for n, (_, a) in _OFF.items()), *_ON.items()]:
        if name in out and asks(out[name]):
            raise MisconfigurationError(
                f"`Trainer(barebones=True, {name}={out[name]!r})` was passed. "
                f"{_WHY[name]} so it is disabled in barebones mode."
            )
    out.update({name: value for name, (value, _) in _OFF.items()})
    return out


def announcement() -> str:
    """What Lightning says when a barebones Trainer is built."""
    return (
        "You are running in `Trainer(barebones=True)` mode. All features that may impact raw speed have been"
        " disabled to facilitate analyzing the Trainer overhead. Specifically, the following features are"
        f" deactivated:{os.linesep}{os.linesep.join(DEACTIVATED)}"
    )
