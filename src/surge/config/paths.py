"""Directories a run writes to: checked when given (a file or a dangling link is refused) and at
fit start (created if missing, then written to once), so a bad path fails before any training;
and claimed by one run at a time (`DirectoryClaim`, a lease: `run_lease.py`; where its file lives:
`run_records.py`)."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import Any

from ..errors import MisconfigurationError, SurgeTypeError
from .run_lease import LeaseHeld, RunLease
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
    """A run's hold on a directory it writes checkpoints to: a lease (`run_lease.RunLease`) naming
    the machine and pid, refreshed while the run lives. In surge's own API it lives in the directory
    itself (`.surge-run.lock`), which every machine writing the directory sees; in the Lightning
    mode, whose folders hold exactly Lightning's files, in surge's folder for the directory
    (`run_records.lock_file`), seen by the runs that share `SURGE_CACHE_DIR`.

    Two live runs given the same directory would share (and overwrite, or resume from) each other's
    `last.ckpt`; the second is refused. A lease whose run is gone (killed on any machine) lapses and
    is taken over; the same process may claim again (fit after fit). Released when the run ends, or
    at the process's exit."""

    def __init__(self, path: Path, what: str, in_directory: bool = False) -> None:
        self.what = what
        self._error: OSError | None = None
        try:
            self.lock = lock_file(path, in_directory)
        except OSError as err:  # raised by acquire(), where every rank hears of it
            self.lock, self._error = path, err
        self.lease = RunLease(self.lock)

    def acquire(self, budget: float | None = None) -> bool:
        """Take the directory (True), or raise `MisconfigurationError` naming the live run that holds
        it; False when watching another machine's lease took longer than `budget` seconds (call
        again to go on: `RunLease.acquire`)."""
        if self._error is not None:
            raise MisconfigurationError(
                f"{self.what}: surge cannot make its folder for the directory's lock ({self._error}); "
                "set SURGE_CACHE_DIR to a folder this user can write."
            )
        try:
            return self.lease.acquire(budget)
        except LeaseHeld as held:
            raise MisconfigurationError(
                f"{self.what} is used by another run that is still going (process {held.holder}, lock file "
                f"{str(self.lock)!r}, refreshed every {self.lease.refresh:g} s): two runs in one directory "
                "overwrite and resume each other's checkpoints. Give this run its own dirpath, or wait for "
                f"that run to end (a run that is gone stops refreshing it, and its lock lapses after "
                f"{self.lease.ttl:g} s)."
            ) from None
        except OSError as err:
            raise MisconfigurationError(
                f"{self.what}: could not take the lock file {str(self.lock)!r} ({err})."
            ) from err

    def release(self) -> None:
        """Give the directory back (a no-op if not held)."""
        self.lease.release()
