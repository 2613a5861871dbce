"""Directories a run writes to: checked when given (a file or a dangling link is refused) and at
fit start (created if missing, then written to once), so a bad path fails before any training;
and claimed by one run at a time (`DirectoryClaim`, whose lock file lives in surge's own folder for
the directory, `run_records.py`, not in the directory itself)."""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import socket
import tempfile
from pathlib import Path
from typing import Any

from ..errors import MisconfigurationError, SurgeTypeError
from .run_records import lock_file


def user_dir(arg: str, value: Any) -> Path:
    """`value` as a path with `~` expanded; refused if it names a file or a dangling symlink."""
    if not isinstance(value, str | os.PathLike):
        raise SurgeTypeError(f"{arg}={value!r} is not valid: pass a str or a path.")
    path = Path(os.path.expanduser(value))  # before Path drops a leading "./": "./~/x" is a folder named ~
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


class DirectoryClaim:
    """A run's hold on a directory it writes checkpoints to: a lock file naming the host and pid,
    kept in surge's folder for the directory (`run_records.lock_file`), so the directory holds only
    checkpoints.

    Two live runs given the same directory would share (and overwrite, or resume from) each other's
    `last.ckpt`; the second is refused. A lock left by a process that is gone is taken over; the same
    process may claim again (fit after fit). Released when the run ends, or at the process's exit."""

    def __init__(self, path: Path, what: str) -> None:
        self.what = what
        self._held = False
        self._error: OSError | None = None
        try:
            self.lock = lock_file(path)
        except OSError as err:  # raised by acquire(), where every rank hears of it
            self.lock, self._error = path, err

    def acquire(self) -> None:
        """Take the directory, or raise `MisconfigurationError` naming the live run that holds it."""
        me = f"{socket.gethostname()} {os.getpid()}"
        if self._error is not None:
            raise MisconfigurationError(
                f"{self.what}: surge cannot make its folder for the directory's lock ({self._error}); "
                "set SURGE_CACHE_DIR to a folder this user can write."
            )
        for _ in range(3):  # a stale lock is removed, then created again exclusively (a racing run wins once)
            try:
                fd = os.open(self.lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self._holder()
                if holder == me or not _alive(holder):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self.lock)
                    continue
                raise MisconfigurationError(
                    f"{self.what} is used by another run that is still going (process {holder}, lock file "
                    f"{str(self.lock)!r}): two runs in one directory overwrite and resume each other's "
                    "checkpoints. Give this run its own dirpath, or wait for that run to end (if it is "
                    "gone, delete the lock file)."
                ) from None
            with os.fdopen(fd, "w") as f:
                f.write(me)
            self._held = True
            atexit.register(self.release)
            return
        raise MisconfigurationError(f"{self.what}: could not take the lock file {str(self.lock)!r}.")

    def release(self) -> None:
        """Give the directory back (a no-op if not held)."""
        if self._held:
            self._held = False
            atexit.unregister(self.release)
            with contextlib.suppress(OSError):
                if self._holder() == f"{socket.gethostname()} {os.getpid()}":
                    os.unlink(self.lock)

    def _holder(self) -> str:
        try:
            return self.lock.read_text().strip()
        except OSError:
            return ""


def _alive(holder: str) -> bool:
    """Whether the process a lock names may still run (one on another host is assumed to)."""
    host, _, pid = holder.rpartition(" ")
    if not pid.isdigit():
        return False  # an unreadable or half-written lock
    if host != socket.gethostname():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True
