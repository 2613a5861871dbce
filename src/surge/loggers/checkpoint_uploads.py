"""What a `ModelCheckpoint` has saved, told to the loggers once the files are durable.

With `async_checkpoint=True` a checkpoint is written in the background: a logger that uploads
checkpoints (`log_model`) must see the file after the write (and the `last.ckpt` link) finished,
not when it began. The callback hands the loggers a frozen copy of its lists (`SavedCheckpoints`)
through the writer's completion (`CheckpointWriter.then`); the callback's own lists may change
before the upload runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..rank_zero import warn


@dataclass(frozen=True)
class SavedCheckpoints:
    """The checkpoint callback's lists at one save, under the names Lightning's loggers read."""

    best_model_path: str = ""
    last_model_path: str = ""
    kth_best_model_path: str = ""
    best_model_score: float | None = None
    best_k_models: dict[str, float] = field(default_factory=dict)
    save_top_k: int = 1
    monitor: str | None = None
    dirpath: str = ""
    owner: int = 0  # id() of the callback: a logger keeps the latest lists of each callback
    callback: Any = field(default=None, compare=False, repr=False)

    def __getattr__(self, name: str) -> Any:
        """Other attributes (`filename`, `mode`, `save_last`, ...) are the callback's own, as a
        logger written for Lightning reads them."""
        callback = self.__dict__.get("callback")
        if callback is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(callback, name)

    @classmethod
    def of(cls, callback: Any) -> SavedCheckpoints:
        return cls(
            best_model_path=str(callback.best_model_path or ""),
            last_model_path=str(getattr(callback, "last_model_path", "") or ""),
            kth_best_model_path=str(getattr(callback, "kth_best_model_path", "") or ""),
            best_model_score=getattr(callback, "best_model_score", None),
            best_k_models=dict(getattr(callback, "best_k_models", {}) or {}),
            save_top_k=int(getattr(callback, "save_top_k", 1)),
            monitor=getattr(callback, "monitor", None),
            dirpath=str(getattr(callback, "dirpath", "") or ""),
            owner=getattr(callback, "owner", id(callback)),
            callback=getattr(callback, "callback", callback),
        )

    def paths(self) -> list[str]:
        """Best, last and the kept top-k, each once."""
        named = [self.best_model_path, self.last_model_path, *self.best_k_models]
        return list(dict.fromkeys(p for p in named if p))


def tell_loggers(loggers: Iterable[Any], saved: SavedCheckpoints) -> None:
    """`after_save_checkpoint(saved)` on each logger. Runs in the checkpoint writer's thread when the
    write is in the background: a logger that fails is reported, never stops training."""
    for lg in loggers:
        try:
            lg.after_save_checkpoint(saved)
        except Exception as err:  # an upload is the logger's business, not the run's
            warn(
                f"{type(lg).__name__}: the checkpoint upload failed ({type(err).__name__}: {err}); training goes on"
            )


def new_files(saved: Any, done: dict[str, float]) -> list[Path]:
    """The files `saved` names that exist and are not in `done` (path -> mtime uploaded) as they are now."""
    out = []
    for path in SavedCheckpoints.of(saved).paths():
        p = Path(path)
        try:
            mtime = p.stat().st_mtime
        except OSError:
            continue
        if p.is_file() and done.get(str(p)) != mtime:
            out.append(p)
    return out


def uploads_at_once(log_model: bool | str, saved: Any) -> bool:
    """Lightning's rule: "all" uploads each checkpoint when it is saved, and so does True when every
    checkpoint is kept (`save_top_k=-1`); otherwise True uploads the kept ones at the end."""
    return log_model == "all" or (log_model is True and getattr(saved, "save_top_k", 1) == -1)
