"""The directory a `ModelCheckpoint` writes to, made ready before any training: checked writable
(its own error names the argument), warned about when not empty (as Lightning), claimed for the
run (a second live run is refused on every process), and cleared of what a killed save left."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..checkpoint import remove_stale_temporaries
from ..checkpoint.shard_files import remove_orphan_shards
from ..config.paths import DirectoryClaim, writable_dir
from ..config.run_records import LOCK_IN_DIRECTORY
from ..errors import MisconfigurationError
from ..rank_zero import warn

if TYPE_CHECKING:
    from .trainer_views import CheckpointRun


def prepare_directory(
    trainer: CheckpointRun,
    folder: Path,
    given: bool,
    warn_if_full: bool,
    claim: DirectoryClaim | None,
) -> DirectoryClaim | None:
    """Ready `folder` for a fit (no other stage writes there); returns this run's claim on it (rank zero)."""
    # Before the cleanup below, whose own EROFS/EACCES would hide the cause, and before any training.
    where = (
        f"ModelCheckpoint(dirpath={str(folder)!r})"
        if given
        else f"the checkpoint directory {str(folder)!r} (under default_root_dir={str(trainer.default_root_dir)!r})"
    )
    if trainer.is_global_zero and warn_if_full and _has_files(folder):
        warn(f"Checkpoint directory {folder} exists and is not empty.")
    writable_dir(folder, where)
    claim = _claim(trainer, folder, where, claim)
    if trainer.is_global_zero:
        remove_stale_temporaries(folder)
        remove_orphan_shards(folder)
    return claim


def _claim(
    trainer: CheckpointRun, folder: Path, where: str, claim: DirectoryClaim | None
) -> DirectoryClaim | None:
    """Rank zero takes the folder's lease; with several processes, all of them hear the outcome, in
    slices of a quarter of the collectives' timeout while rank zero watches another machine's lease
    (up to its TTL), so no rank waits in a collective past its timeout."""
    many = trainer.world_size > 1
    timeout = getattr(trainer.strategy, "timeout", None)
    budget = timeout.total_seconds() / 4 if many and timeout is not None else None
    while True:
        error, pending = None, False
        if trainer.is_global_zero:
            in_directory = trainer.semantics.checkpoint_lock == "in_directory"
            claim = claim or DirectoryClaim(folder, where, in_directory=in_directory)
            try:
                pending = not claim.acquire(budget)
            except MisconfigurationError as err:
                error = str(err)
        if many:
            error, pending = trainer.strategy.broadcast((error, pending))  # every process raises, none waits
        if error is not None:
            raise MisconfigurationError(error)
        if not pending:
            return claim


def _has_files(path: Path) -> bool:
    return path.is_dir() and any(p.name != LOCK_IN_DIRECTORY for p in path.iterdir())
