"""What a resumed `ModelCheckpoint` takes back from a checkpoint's state: only the files that are
still surge checkpoints directly inside its directory (a hostile or stale state never makes the
callback read, rank or delete anything else)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import torch
from torch import Tensor

from ..checkpoint import is_surge_checkpoint
from ..rank_zero import warn

_PATH_KEYS = ("best_model_path", "kth_best_model_path", "last_model_path")


@dataclass
class Kept:
    """The lists and values of a saved ModelCheckpoint state that name files still ours."""

    recent: list[str] = field(default_factory=list)
    best_k_models: dict[str, Tensor] = field(default_factory=dict)
    best_model_path: str = ""
    kth_best_model_path: str = ""
    last_model_path: str = ""
    best_model_score: Tensor | None = None
    current_score: Tensor | None = None
    kth_value: Tensor | None = None


def warn_if_moved(state: dict[str, Any], dirpath: str) -> None:
    """Warn (Lightning's words) when the state was saved by a callback writing to another directory:
    none of its files are taken back (surge ranks and deletes the files of its own dirpath only)."""
    saved = state.get("dirpath", dirpath)
    if saved != dirpath:
        warn(
            f"The dirpath has changed from {saved!r} to {dirpath!r}, therefore `best_model_score`, "
            "`kth_best_model_path`, `kth_value`, `last_model_path`, `best_k_models` and `best_model_path` "
            "won't be reloaded."
        )


def own_files(state: dict[str, Any], folder: Path, extension: str) -> Kept:
    """The part of `state` (a ModelCheckpoint's) that names surge checkpoints directly in `folder`."""
    recent, scores = state.get("recent"), state.get("best_k_models")
    recent = recent if isinstance(recent, list) else []
    scores = scores if isinstance(scores, dict) else {}
    named = [*recent, *scores, *(state.get(k) for k in _PATH_KEYS)]
    own = {p for p in named if _is_own_checkpoint(p, folder, extension)}
    # a file gone is one this callback deleted after the state was taken (the older top-k)
    dropped = sorted({repr(p) for p in named if p not in own and p and Path(p).exists()})
    if dropped:
        warn(
            f"ModelCheckpoint: the checkpoint being resumed names files that are not surge checkpoints in "
            f"{folder}: {', '.join(dropped)}; they are dropped from its lists (never read or deleted)"
        )
    kept = Kept(
        recent=[p for p in recent if p in own],
        best_k_models={p: _tensor(v) for p, v in scores.items() if p in own and _is_score(v)},
    )
    for key in _PATH_KEYS:
        setattr(kept, key, state[key] if state.get(key) in own else "")
    for key in ("best_model_score", "current_score", "kth_value"):
        value = state.get(key)
        if _is_score(value) and (key != "best_model_score" or kept.best_model_path):
            setattr(kept, key, _tensor(value))
    return kept


def _is_own_checkpoint(value: Any, folder: Path, extension: str) -> bool:
    """Whether `value` names a surge checkpoint file directly inside `folder`."""
    if not isinstance(value, str) or not value:
        return False
    path = Path(value)
    if path.suffix != extension or path.resolve().parent != folder.resolve():
        return False
    return path.is_file() and is_surge_checkpoint(path)


def _is_score(value: Any) -> TypeGuard[int | float | Tensor]:
    if isinstance(value, Tensor):
        return value.numel() == 1 and value.is_floating_point()
    return isinstance(value, int | float) and not isinstance(value, bool)


def _tensor(value: int | float | Tensor) -> Tensor:
    return value.detach().float().reshape(()) if isinstance(value, Tensor) else torch.tensor(float(value))
