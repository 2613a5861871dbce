"""What a checkpoint must hold before a run reads it: its entries there and of the right kind, and,
to resume a fit, surge's training state. A malformed or foreign checkpoint is refused here, with the
file and every problem named, not later with a bare KeyError."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import CheckpointError
from .shard_files import is_sharded

_LOOP_FIELDS: dict[str, type] = {
    "epoch": int,
    "global_step": int,
    "batches_done": int,
    "epoch_done": bool,
}


def check_resumable(ckpt: Mapping[str, Any], path: str | Path) -> None:
    """surge resumes a fit only from its own checkpoints (their loop, loader and RNG state); another
    one (weights only, or Lightning's) can give its weights: `Model.load_from_checkpoint`."""
    if "loop" in ckpt:
        return
    held = (
        f"was written by Lightning {ckpt['pytorch-lightning_version']}"
        if "pytorch-lightning_version" in ckpt
        else "holds weights only (no training state)"
    )
    raise CheckpointError(
        f"{path} {held}; it cannot resume a fit: Model.load_from_checkpoint(path), then fit()"
    )


def check_layout(ckpt: Mapping[str, Any], path: str | Path) -> None:
    """The entries a run reads are there and of the right kind: a malformed checkpoint is refused
    here, with the file and every problem named, not later with a bare KeyError."""
    problems = []
    if not is_sharded(ckpt) and not isinstance(ckpt.get("state_dict"), Mapping):
        problems.append(_kind_problem(ckpt, "state_dict", "a dict (the model weights)"))
    if "loop" in ckpt:
        problems += _loop_problems(ckpt["loop"])
        for key in ("optimizer_states", "lr_schedulers"):
            if not isinstance(ckpt.get(key), list):
                problems.append(_kind_problem(ckpt, key, "a list (needed to resume a fit)"))
    if problems:
        raise CheckpointError(
            f"checkpoint {path} is malformed: {'; '.join(problems)} (its entries: {sorted(map(str, ckpt))})"
        )


def _kind_problem(ckpt: Mapping[str, Any], key: str, wanted: str) -> str:
    if key not in ckpt:
        return f"it has no {key!r} entry, which must be {wanted}"
    return f"its {key!r} entry is a {type(ckpt[key]).__name__}, which must be {wanted}"


def _loop_problems(loop: Any) -> list[str]:
    if not isinstance(loop, Mapping):
        return [f"its 'loop' entry is a {type(loop).__name__}, which must be a dict of the loop's counters"]
    missing = [key for key in _LOOP_FIELDS if key not in loop]
    problems = [f"its 'loop' entry lacks {missing}"] if missing else []
    for key, kind in _LOOP_FIELDS.items():
        value = loop.get(key)
        if key in missing:
            continue
        negative = isinstance(value, int) and value < 0
        if not isinstance(value, kind) or (kind is int and (isinstance(value, bool) or negative)):
            wanted = "True or False" if kind is bool else "an int >= 0"
            problems.append(f"its 'loop' entry has {key}={value!r}, which must be {wanted}")
    return problems
