"""The files loggers write: replaced atomically or appended whole, never rewritten in place.

A logger that cannot write says so once and lets training go on (checkpoints are what must not
fail silently); what it could not write stays with it, to be written when the disk has room again.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..rank_zero import info, warn


def temporary_beside(path: Path) -> Path:
    """A temporary name beside `path`, in the pattern `remove_stale_temporaries` knows."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data`: a temporary file, fsync, `os.replace`; on failure `path` is untouched
    and no temporary is left."""
    tmp = temporary_beside(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def append_whole(path: Path, data: bytes, size: int) -> int:
    """Append `data` to `path`, whose first `size` bytes are known whole; return the new size.

    Whatever lies past `size` (a tail an earlier failure could not cut) is dropped first, and on
    failure the file is cut back to `size`: a reader never sees half a row.
    """
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
        view, at = memoryview(data), size
        while view:
            written = os.pwrite(fd, view, at)
            view, at = view[written:], at + written
        os.fsync(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
        raise
    finally:
        os.close(fd)
    return size + len(data)


def hparams_yaml(params: Mapping[str, Any]) -> bytes:
    """`hparams.yaml`'s bytes: the hyper-parameters as plain data, keys sorted, as Lightning's."""
    import yaml

    from ..module.hparams import plain

    return yaml.safe_dump(plain(dict(params))).encode()


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class WriteFailures:
    """One warning when a logger's writes start failing, one line when they work again."""

    def __init__(self, logger: str) -> None:
        self.logger = logger
        self.failing = False
        self.error: OSError | None = None

    def failed(self, path: Path, err: OSError, kept: str) -> None:
        self.error = err
        if not self.failing:
            warn(
                f"{self.logger} could not write {path}: {err}. Training continues; {kept}. "
                "Free space (or fix the error) to get the logs back.",
                stacklevel=3,
            )
        self.failing = True

    def recovered(self, path: Path) -> None:
        if self.failing:
            info(f"{self.logger}: {path} is written again; nothing that was kept is lost.")
        self.failing, self.error = False, None
