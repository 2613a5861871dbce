"""Where surge keeps its own files of a run: the goodput heartbeat (`goodput.json`) and the claim
on a checkpoint folder (a lease, `config/run_lease.py`). Never in the working directory:

- surge's own API with a logger: the heartbeat goes in the run's log folder (`trainer.log_dir`);
- otherwise (no logger, or the Lightning mode, whose folders hold exactly Lightning's files): in
  surge's folder for that directory, `$SURGE_CACHE_DIR/folders/<name>-<key>/` (by default
  `~/.cache/surge`), the key a hash of the directory's absolute path and inode;
- the claim on a checkpoint folder: in surge's own API in the folder itself (`.surge-run.lock`,
  seen by every machine that writes the folder); in the Lightning mode in surge's folder for it
  (`run.lock`).

The inode in the key tells two node-local directories of one path apart (`/tmp/ckpts` on two
machines), while one directory on a shared filesystem has one key on every machine; so in the
Lightning mode two runs on two machines are refused one checkpoint folder when `SURGE_CACHE_DIR` is
shared too (a home folder every node mounts). See docs/long_runs.md#where-surges-own-files-live.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from ..rank_zero import warn

HEARTBEAT_FILE = "goodput.json"
LOCK_FILE = "run.lock"
LOCK_IN_DIRECTORY = ".surge-run.lock"  # surge's own API: the lease in the checkpoint folder it claims


def surge_home() -> Path:
    """surge's own folder for this user: `$SURGE_CACHE_DIR`, else `~/.cache/surge`."""
    return Path(os.environ.get("SURGE_CACHE_DIR") or Path.home() / ".cache" / "surge")


def _fallback_home() -> Path:
    """Where surge's folders go when `surge_home()` cannot be written (a read-only home)."""
    return Path(tempfile.gettempdir()) / f"surge-{os.getuid() if hasattr(os, 'getuid') else 'user'}"


def folder_of(directory: str | os.PathLike[str]) -> Path:
    """surge's folder for `directory` (made if missing): the same for the same directory, whatever
    path names it; another for another directory."""
    path = Path(directory).resolve()
    try:
        inode = path.stat().st_ino
    except OSError:
        inode = 0  # not made yet: keyed by its path alone
    key = hashlib.sha256(f"{path}\0{inode}".encode()).hexdigest()[:16]
    name = f"{path.name[:40] or 'root'}-{key}"
    try:
        folder = surge_home() / "folders" / name
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # a home this user cannot write: this machine's temporary folder, said once
        folder = _fallback_home() / "folders" / name
        folder.mkdir(parents=True, exist_ok=True)
        _say_fallback(surge_home(), err)
    return folder


_SAID: set[Path] = set()  # the unwritable homes a fallback was said for (once a process each)


def _say_fallback(home: Path, err: OSError) -> None:
    if home not in _SAID:
        _SAID.add(home)
        warn(
            f"surge's folder {str(home)!r} (SURGE_CACHE_DIR, else ~/.cache/surge) cannot be written ({err}): its run "
            f"locks and heartbeats go to {str(_fallback_home())!r} instead, which only this machine sees (two machines "
            "sharing a checkpoint folder are not refused). Set SURGE_CACHE_DIR to a writable folder they share."
        )


def lock_file(directory: str | os.PathLike[str], in_directory: bool = False) -> Path:
    """The file that claims checkpoint folder `directory` for one live run: in it when
    `in_directory` (surge's own API: every machine that writes the folder sees it), else in
    surge's folder for it (the Lightning mode)."""
    return Path(directory) / LOCK_IN_DIRECTORY if in_directory else folder_of(directory) / LOCK_FILE


def heartbeat_file(log_dir: str | os.PathLike[str], own_folder: bool) -> Path:
    """The goodput heartbeat of a run logging to `log_dir`: in it when `own_folder` (surge's own
    API with a logger), else in surge's folder for it."""
    return (Path(log_dir) if own_folder else folder_of(log_dir)) / HEARTBEAT_FILE
