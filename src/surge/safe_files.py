"""surge's own small files in a run's folders (records, caches, dumps, leases), written and read
back without following links.

A run folder may be shared with other users, so any name in it may have been planted as a link to
a file elsewhere, and a path read from a checkpoint may name anything (a FIFO, `/dev/zero`). So:

- a file is written to a new temporary beside it, created exclusively and without following a link
  (`O_CREAT | O_EXCL | O_NOFOLLOW`), then renamed over its name (a rename replaces a link itself,
  never the file it points to);
- a file is read only when it is a regular file (not a link, a FIFO or a device) of at most a given
  size, opened without blocking.
"""

from __future__ import annotations

import contextlib
import os
import stat
import uuid
from pathlib import Path

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def write_replacing(path: str | os.PathLike[str], data: bytes, mode: int = 0o644, sync: bool = False) -> Path:
    """Replace `path` with `data` (a new temporary, then `os.replace`); raises `OSError` with `path`
    untouched and no temporary left. `sync`: fsync the data before the rename."""
    path = Path(path)
    # The pattern checkpoint.remove_stale_temporaries knows: a killed writer's temporary is cleaned.
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def read_bounded(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes; `OSError` otherwise (a link, a
    FIFO, a device, a folder, a larger file), saying which."""
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{os.fspath(path)} is not a regular file")
        if info.st_size > limit:
            raise OSError(f"{os.fspath(path)} holds {info.st_size} bytes, more than the {limit} expected")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:  # grew while read
        raise OSError(f"{os.fspath(path)} holds more than the {limit} bytes expected")
    return data
