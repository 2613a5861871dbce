"""The on-disk layout of sharded checkpoints: naming, digests, verification and clean-up.

Kept apart from `sharded` (which reads and writes the shards with torch.distributed.checkpoint)
so that checkpoint housekeeping costs no heavy import.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import CheckpointError
from . import load_checkpoint, process_alive

SHARDS = "sharded"
TENSOR_KEYS = ("state_dict", "optimizer_states")
_SHARD_DIR_RE = re.compile(r"^(?P<name>.+)\.shards-(?P<pid>\d+)-[0-9a-f]{8}$")
_CHUNK = 1 << 22


def is_sharded(ckpt: Mapping[str, Any]) -> bool:
    """Whether a loaded checkpoint keeps its model and optimizer states in a shard folder (the one
    test of it: every reader asks here)."""
    return SHARDS in ckpt


def shard_dir(ckpt: Mapping[str, Any], path: str | Path) -> Path:
    """The shard folder a sharded checkpoint names: a folder beside it, never anywhere else."""
    name = _shard_entry(ckpt, path).get("dir")
    folder = Path(path).parent / str(name)
    if not (isinstance(name, str) and _SHARD_DIR_RE.match(name) and _plain_name(name)) or not _inside(
        folder, Path(path).parent
    ):
        raise CheckpointError(
            f"checkpoint {path} names the shard folder {name!r}; it must be a folder beside the checkpoint "
            "named NAME.shards-PID-ID (surge writes no other), so it is refused"
        )
    return folder


def shard_files(ckpt: Mapping[str, Any], path: str | Path) -> dict[str, str]:
    """The shard folder's file names and digests, each a plain name inside the folder."""
    files = _shard_entry(ckpt, path).get("files")
    if not isinstance(files, Mapping) or not all(
        isinstance(n, str) and _plain_name(n) and isinstance(d, str) for n, d in files.items()
    ):
        raise CheckpointError(
            f"checkpoint {path} lists its shard files wrongly (each must be a plain file name with its digest)"
        )
    return dict(files)


def _shard_entry(ckpt: Mapping[str, Any], path: str | Path) -> Mapping[str, Any]:
    entry = ckpt[SHARDS]
    if not isinstance(entry, Mapping):
        raise CheckpointError(f"checkpoint {path} has a malformed {SHARDS!r} entry ({type(entry).__name__})")
    return entry


def _plain_name(name: str) -> bool:
    return name not in ("", ".", "..") and "/" not in name and "\\" not in name and "\0" not in name


def _inside(path: Path, folder: Path) -> bool:
    """Whether `path`, links resolved, is `folder` itself or lies inside it."""
    return path.resolve().is_relative_to(folder.resolve())


def file_digest(path: Path) -> str:
    h = hashlib.blake2b(digest_size=32)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _named_folder(path: Path) -> str | None:
    """The shard folder the checkpoint now at `path` names, if it is a readable sharded one. A
    checkpoint names only a folder beside it: with none there, it is not read (a plain checkpoint's
    deletion, every epoch by default, would otherwise load it whole)."""
    if not path.is_file() or not _has_shard_folders(path.parent):
        return None
    try:
        ckpt = load_checkpoint(path, verify=False)
        return shard_dir(ckpt, path).name if is_sharded(ckpt) else None
    except CheckpointError:
        return None  # unreadable, or naming a folder that is not its own: nothing to remove


def _has_shard_folders(directory: Path) -> bool:
    """Whether `directory` holds any folder named like a shard folder (NAME.shards-PID-ID)."""
    try:
        with os.scandir(directory) as entries:
            return any(_SHARD_DIR_RE.match(e.name) and e.is_dir() for e in entries)
    except OSError:
        return False


def referenced_folders(directory: Path) -> set[str]:
    """Shard folders named by any checkpoint file in `directory`."""
    return {name for p in directory.glob("*.ckpt") if p.is_file() and (name := _named_folder(p))}


def _remove_if_unreferenced(folder: Path) -> None:
    if folder.is_dir() and folder.name not in referenced_folders(folder.parent):
        shutil.rmtree(folder, ignore_errors=True)


def remove_checkpoint(path: str | Path) -> None:
    """Delete a checkpoint file and, when no other checkpoint (e.g. `last.ckpt`) names it, its shards."""
    path = Path(path)
    folder = _named_folder(path)
    path.unlink(missing_ok=True)
    if folder is not None:
        _remove_if_unreferenced(path.parent / folder)


def remove_orphan_shards(directory: str | Path) -> list[Path]:
    """Shard folders that no checkpoint names and whose writer has exited: a save that was killed."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    candidates = [e for e in directory.iterdir() if _SHARD_DIR_RE.match(e.name) and e.is_dir()]
    if not candidates:
        return []
    named = referenced_folders(directory)
    removed = []
    for entry in candidates:
        match = _SHARD_DIR_RE.match(entry.name)  # (every candidate matches)
        if match is not None and entry.name not in named and not process_alive(int(match["pid"])):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def verify_shards(ckpt: Mapping[str, Any], path: str | Path, rank: int = 0, world_size: int = 1) -> list[str]:
    """Problems with this rank's share of the shard files (all of them for one process)."""
    folder = shard_dir(ckpt, path)
    if not folder.is_dir():
        return [f"its shard folder {folder} is missing"]
    expected = shard_files(ckpt, path)
    names = sorted(expected)
    problems = []
    for name in names[rank::world_size]:
        file = folder / name
        if not file.is_file() or not _inside(file, folder):
            problems.append(f"shard {file} is missing (or not a file of its own inside {folder})")
        elif file_digest(file) != expected[name]:
            problems.append(f"shard {file} failed its checksum (corrupt or changed after it was written)")
    return problems
