"""surge's exceptions: every one is a `SurgeError`, and a ValueError/TypeError/RuntimeError as fits."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = [
    "CheckpointError",
    "IncompatibleCheckpointError",
    "MisconfigurationError",
    "SurgeError",
    "SurgeRuntimeError",
    "SurgeTypeError",
]


class SurgeError(Exception):
    """Base class of every error surge raises on purpose."""


class MisconfigurationError(SurgeError, ValueError):
    """An argument or a hook's return value is not one surge can use."""


class SurgeTypeError(SurgeError, TypeError):
    """A value has the wrong type."""


class SurgeRuntimeError(SurgeError, RuntimeError):
    """Something went wrong while running (bad data, a broken checkpoint, a failed step)."""


class CheckpointError(SurgeRuntimeError):
    """A checkpoint cannot be written, read or applied."""


class IncompatibleCheckpointError(CheckpointError):
    """A checkpoint that reads whole but was saved on a layout this run cannot resume (another
    pipeline layout): `ckpt_path="auto"` refuses it rather than skip it and start afresh."""


class UntrustedCheckpointError(CheckpointError, ValueError):
    """A checkpoint asks for code to be imported or run on loading (a ValueError, as Lightning's)."""


def bad_value(arg: str, value: object, allowed: str) -> MisconfigurationError:
    """The standard message: the argument, the value it got and what is allowed."""
    return MisconfigurationError(f"{arg}={value!r} is not valid: {allowed}.")


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """` (did you mean 'x'?)` naming the closest of `choices` to a misspelled `name` (or the one that
    begins with it), or "" when none is close: the one way surge suggests a fix for a name it does
    not know."""
    choices = list(choices)
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    if not close and len(name) >= 3:  # a name cut short: `seed` for `seed_everything`
        close = [c for c in choices if c.startswith(name)]
    return f" (did you mean {close[0]!r}?)" if len(close) == 1 else ""


# What each optional extra of the surge-train distribution installs (pyproject.toml's extras; a test
# holds the two equal): a missing package's message gives a command that works today.
EXTRA_PACKAGES = {
    "demo": "scikit-learn",
    "tensorboard": "tensorboard",
    "cli": "'jsonargparse[signatures]'",
    "plot": "matplotlib",
    "metrics": "torchmetrics",
    "export": "safetensors",
    "mlflow": "mlflow-skinny sqlalchemy alembic",
    "wandb": "wandb",
    "data": "torchdata",
}


def install_hint(extra: str) -> str:
    """`pip install <its packages>`, and the extra that brings them (from a clone: `-e ".[extra]"`)."""
    return f"pip install {EXTRA_PACKAGES[extra]} (surge-train's '{extra}' extra: pip install -e \".[{extra}]\" in a clone)"
