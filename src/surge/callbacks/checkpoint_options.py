"""`ModelCheckpoint`'s options checked when given (before any work), its schedule, and its file
names: the `filename` template checked, then filled at a save (Lightning's rules: `{name}` becomes
`name=value` with `auto_insert_metric_name`, a name that was not logged is written as 0, a `/` in a
metric name becomes `_`)."""

from __future__ import annotations

import datetime
import os
import re
import string
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..config.semantics import Semantics
from ..errors import MisconfigurationError, bad_value
from ..rank_zero import warn

if TYPE_CHECKING:
    from .trainer_views import Progress, Ranks, ValidationCadence

_FIELD = re.compile(r"\{([^{}:!]+)([^{}]*)\}")


def fill_template(template: str, values: dict[str, Any], insert_names: bool, equals: str = "=") -> str:
    """`template` with each `{name[:spec]}` replaced by the value (0 if `values` has none)."""

    def fill(match: re.Match) -> str:
        name, spec = match.group(1), match.group(2)
        if name not in values:
            warn(
                f"ModelCheckpoint(filename={template!r}): {{{name}}} is not logged, so it is written as 0 "
                f"(as Lightning does); log it with self.log({name!r}, ...) before the save, or drop it"
            )
        value = values.get(name, 0)
        if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
            value = value.item()  # a 0-d tensor (on any device): the host read of a save
        text = format(value, spec[1:] if spec.startswith(":") else "")
        return f"{name}{equals}{text}" if insert_names else text

    return _FIELD.sub(fill, template).replace("/", "_")


def free_name(name_of: Any, keep: str, taken: set[str], first: int) -> str:
    """`name_of(None)`, or with the first version `-vN` (from `first`) that no file and no path in
    `taken` has; `keep` is a file of ours to replace, so never versioned away from."""
    path, version = name_of(None), first
    while path != keep and (os.path.exists(path) or path in taken):
        path, version = name_of(version), version + 1
    return path


def monitor_candidates(trainer: Progress) -> dict[str, Tensor]:
    """What a save may rank or name: `callback_metrics` (as they stand now), `epoch` and `step`."""
    candidates = dict(trainer.callback_metrics)
    for key, now in (("epoch", trainer.current_epoch), ("step", trainer.global_step)):
        logged = candidates.get(key)  # a logged "epoch"/"step" wins, as an int
        candidates[key] = logged.int() if isinstance(logged, Tensor) else torch.tensor(now)
    return candidates


def missing_monitor(monitor: str, candidates: dict[str, Any]) -> str:
    """The message when the monitored metric is not among what a save may rank."""
    return (
        f"ModelCheckpoint(monitor={monitor!r}) could not find the monitored key in the logged metrics: "
        f"{sorted(candidates)}. Log it with self.log({monitor!r}, value)."
    )


def check_filename(template: Any, save_last: Any) -> None:
    """What can be known before any save: a str template whose fields are names with a format spec
    that fits their value (an int for `epoch`/`step`, a float for metrics), and no clash with last.ckpt."""
    arg = f"ModelCheckpoint(filename={template!r})"
    if not isinstance(template, str) or not template:
        raise bad_value(
            "ModelCheckpoint(filename)", template, 'None or a non-empty str like "{epoch}-{val_loss:.3f}"'
        )
    try:
        fields = [
            (name, spec or "", conv)
            for _, name, spec, conv in string.Formatter().parse(template)
            if name is not None
        ]
    except ValueError as err:
        raise MisconfigurationError(
            f'{arg} is not valid: {err}; braces must pair up around a name, as in "{{epoch}}-{{val_loss:.3f}}".'
        ) from err
    if "{{" in template or "}}" in template:
        raise MisconfigurationError(f"{arg} is not valid: literal braces ({{{{ or }}}}) are not supported.")
    for name, spec, conv in fields:
        if not name or conv is not None or "{" in spec:
            raise MisconfigurationError(
                f"{arg} is not valid: each field must be a name with an optional format spec, like {{epoch}} or "
                "{val_loss:.3f} (no empty {}, !r conversions or nested fields)."
            )
        sample = 0 if name in ("epoch", "step") else 1.0
        try:
            format(sample, spec)
        except ValueError as err:
            kind = "an int" if name in ("epoch", "step") else "a float metric"
            raise MisconfigurationError(
                f"{arg} is not valid: the format spec {spec!r} of {{{name}}} does not fit {kind} ({err})."
            ) from err
    if save_last and not fields and template.replace("/", "_") == "last":
        raise MisconfigurationError(
            f"{arg} with save_last=True is not valid: the top-k files would be written as last.ckpt, the file "
            "save_last keeps; choose another filename."
        )


def check_arguments(mode: Any, save_top_k: Any, save_last: Any, monitor: Any) -> None:
    """The arguments that need no run, refused with Lightning's messages (users match on them)."""
    if mode not in ("min", "max"):
        raise MisconfigurationError(
            f"`mode` can be min, max but got {mode} (ModelCheckpoint(mode={mode!r}))."
        )
    if isinstance(save_top_k, bool) or not isinstance(save_top_k, int):
        raise bad_value("ModelCheckpoint(save_top_k)", save_top_k, "an int >= -1 (-1 keeps all)")
    if save_top_k < -1:
        raise MisconfigurationError(
            f"Invalid value for save_top_k={save_top_k}. Must be >= -1 (-1 keeps all)."
        )
    if save_last not in (None, True, False, "link"):
        raise bad_value("ModelCheckpoint(save_last)", save_last, 'None, True, False or "link"')
    # Built by a script before any Trainer, and refused then, as Lightning: it reads the mode itself.
    check_top_k_tracked(save_top_k, monitor, Semantics.current())


def check_top_k_tracked(save_top_k: int, monitor: str | None, semantics: Semantics) -> None:
    """`save_top_k` above 1 without a monitor: surge's own API keeps the newest k; the Lightning mode
    refuses it, as Lightning (`Semantics.top_k_without_monitor`)."""
    if monitor is None and save_top_k not in (-1, 0, 1) and semantics.top_k_without_monitor == "refused":
        raise MisconfigurationError(
            f"ModelCheckpoint(save_top_k={save_top_k}, monitor=None) is not a valid configuration. No quantity "
            "for top_k to track (surge's own API keeps the newest k; under Lightning, pass monitor=...)."
        )


@dataclass(frozen=True)
class Schedule:
    """When ModelCheckpoint saves: one of every n epochs (the default, 1), every n optimizer steps,
    or every so many seconds (0 for none of the first two)."""

    every_n_train_steps: int
    every_n_epochs: int
    train_time_interval: float | None

    @classmethod
    def of(cls, steps: Any, epochs: Any, interval: Any) -> Schedule:
        for name, value in (("every_n_train_steps", steps), ("every_n_epochs", epochs)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise bad_value(f"ModelCheckpoint({name})", value, "None or an int >= 0")
            if value is not None and value < 0:
                raise MisconfigurationError(
                    f"Invalid value for {name}={value} (ModelCheckpoint). Must be >= 0."
                )
        given = interval
        if isinstance(interval, datetime.timedelta):
            interval = interval.total_seconds()
        if interval is not None and (
            isinstance(interval, bool) or not isinstance(interval, int | float) or interval < 0
        ):
            raise bad_value(
                "ModelCheckpoint(train_time_interval)", interval, "None, seconds >= 0 or a timedelta"
            )
        if steps is None and epochs is None and interval is None:
            epochs = 1
        if sum((bool(steps), bool(epochs), interval is not None)) > 1:
            raise MisconfigurationError(
                f"Combination of parameters every_n_train_steps={steps or 0}, every_n_epochs={epochs or 0} and "
                f"train_time_interval={given} should be mutually exclusive (ModelCheckpoint saves on one schedule)."
            )
        return cls(steps or 0, epochs or 0, None if interval is None else float(interval))


@dataclass
class IntervalClock:
    """`train_time_interval`'s clock: due once that many seconds have passed since the last time it
    was (or since the training started); every process decides alike. Compared by value (a copied
    or unpickled callback equals the original, as Lightning's)."""

    seconds: float | None
    start: float | None = None  # set when the training starts

    def restart(self) -> None:
        self.start = time.monotonic()

    def due(self, trainer: Ranks) -> bool:
        if self.seconds is None or self.start is None:
            return False
        now = time.monotonic()
        due = now - self.start >= self.seconds
        if trainer.world_size > 1:
            due = trainer.strategy.reduce_bool(due)
        if due:
            self.start = now
        return due


def saves_on_train_epoch_end(choice: bool | None, trainer: ValidationCadence) -> bool:
    """Whether epoch saves happen at the training epoch's end, else after validation (`choice`,
    `save_on_train_epoch_end`, decides when given; otherwise Lightning's rule)."""
    if choice is not None:
        return choice
    if trainer.check_val_every_n_epoch != 1:
        return False  # which epochs validate is not known: save after validation
    if not sum(trainer.num_val_batches):
        return True
    return trainer.val_check_interval == 1.0


def validates_after_epoch(trainer: ValidationCadence) -> bool:
    """Whether a validation runs right after this epoch's last batch."""
    every = trainer.check_val_every_n_epoch
    return bool(trainer.enable_validation and sum(trainer.num_val_batches)) and (
        every is None or (trainer.current_epoch + 1) % every == 0
    )
