"""Directories a run writes to: checked when given (a file or a dangling link is refused) and at
fit start (created if missing, then written to once), so a bad path fails before any training."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import Any

from .errors import MisconfigurationError, SurgeTypeError


def user_dir(arg: str, value: Any) -> Path:
    """`value` as a path with `~` expanded; refused if it names a file or a dangling symlink."""
    if not isinstance(value, str | os.PathLike):
        raise SurgeTypeError(f"{arg}={value!r} is not valid: pass a str or a path.")
    path = Path(value).expanduser()
    _check_kind(f"{arg}={str(path)!r}", path)
    return path


def writable_dir(path: Path, what: str) -> Path:
    """Create `path` if missing and write (then delete) one small file in it; an OS error is
    reported with `what` (the argument and the path)."""
    _check_kind(what, path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise MisconfigurationError(
            f"{what} is not valid: the directory cannot be created ({_describe(err)})."
        ) from err
    try:
        fd, probe = tempfile.mkstemp(prefix=".surge-write-test-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise MisconfigurationError(
            f"{what} is not valid: the directory is not writable ({_describe(err)}); choose a writable directory."
        ) from err
    return path


def _check_kind(what: str, path: Path) -> None:
    if path.is_symlink() and not path.exists():
        raise MisconfigurationError(
            f"{what} is not valid: it is a symlink to {os.readlink(path)!r}, which does not exist; "
            "point it at a directory or remove the link."
        )
    if path.exists() and not path.is_dir():
        raise MisconfigurationError(f"{what} is not valid: it is an existing file, not a directory.")


def _describe(err: OSError) -> str:
    code = errno.errorcode.get(err.errno, "") if err.errno is not None else ""
    where = f": {err.filename}" if err.filename else ""
    return f"{code} {err.strerror or err}{where}".strip()
