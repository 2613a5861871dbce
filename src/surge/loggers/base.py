"""The Logger interface: where metrics and hyper-parameters go. Only rank zero writes."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import bad_value
from ..rank_zero import info

PLAIN_NUMBERS = (float, int)  # what the trainer gives loggers; `read_now` is for anything else


def read_now(value: Any) -> Any:
    """A value a logger keeps for a later write, read when it is logged: a tensor's (or an array's)
    number, as Lightning's loggers take it (kept as it is, it may change in place before the write,
    and a tensor keeps its autograd graph alive); anything else as it is. The trainer's values are
    floats already: only a direct `log_metrics` call passes others."""
    item = getattr(value, "item", None)
    return item() if callable(item) else value


class Logger:
    """Receives host floats at log intervals; never tensors, never per step unless asked."""

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def version(self) -> int | str | None:
        return None

    @property
    def log_dir(self) -> str | None:
        """The run directory where this logger writes (checkpoints go under it by default)."""
        return None

    @property
    def save_dir(self) -> str | None:
        """The folder given to the logger, under which its runs are made."""
        return None

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        raise NotImplementedError

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        """Record the run's hyper-parameters."""

    def log_graph(self, model: Any, input_array: Any = None) -> None:
        """Record the model's graph (called at a fit's start; a logger that draws graphs does it)."""

    def save(self) -> None:
        """Flush what is buffered."""

    def finalize(self, status: str) -> None:
        """Close files at the end of a run ("success", "failed" or "interrupted")."""
        self.save()

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        """A `ModelCheckpoint` has saved (rank zero): a logger that uploads checkpoints does it here."""

    def run_state(self) -> dict[str, Any] | None:
        """What identifies this logger's run (a version, a run id), stored in checkpoints so that
        `fit(ckpt_path=...)` continues the same run (starting the run if it was not); None: no run."""
        return None

    def resume_run(self, state: Mapping[str, Any], step: int) -> None:
        """Continue the run `state` (from `run_state`) names, before anything is logged. What the run
        holds from `step` on is replaced (or, where it cannot be removed, not written again): the
        resumed fit logs it again, and the values logged at `step` before the checkpoint are given
        again first."""


def no_prefix(cls: str, prefix: str) -> None:
    """Lightning's `prefix=` for metric names: only the empty one (name the metrics in `self.log`)."""
    if prefix:
        raise bad_value(f"{cls}(prefix)", prefix, '"" (put the prefix in the names given to self.log)')


class RunDir:
    """`save_dir/name/version_N`: the next free N unless a version is given; made on first use
    (so a Trainer that never logs creates nothing).

    A new N is claimed with `mkdir` (which only one process can win), so runs started together
    never share a directory. Temporaries that killed writers left in earlier runs' directories
    are removed then.
    """

    def __init__(self, save_dir: str | Path, name: str, version: int | str | None) -> None:
        self.root, self.name, self._requested = Path(save_dir), name, version
        self.save_dir = os.fspath(save_dir)  # as given: Lightning's loggers return the strings
        self._path: Path | None = None
        self._version: int | str | None = None

    def _resolve(self) -> Path:
        if self._path is None:
            base = self.root / self.name if self.name else self.root
            base.mkdir(parents=True, exist_ok=True)
            version = self._requested
            if version is None:
                self._version, self._path = claim_version(base)
            else:
                self._path = base / (version if isinstance(version, str) else f"version_{version}")
                self._path.mkdir(exist_ok=True)
                self._version = version
            sweep_run_temporaries_once(base)
        return self._path

    @property
    def path(self) -> Path:
        return self._resolve()

    @property
    def root_dir(self) -> str:
        """`save_dir/name` (`save_dir` when the name is empty), a str as Lightning's."""
        return os.path.join(self.save_dir, self.name) if self.name else self.save_dir

    @property
    def log_dir(self) -> str:
        """`root_dir/version_N` (or the version given as a str), made now if it was not."""
        return os.path.join(self.root_dir, self._resolve().name)

    def run_state(self) -> dict[str, Any]:
        """`{"version": ...}` (a logger's `run_state`); the directory is made now if it was not: a
        checkpoint written before anything was logged still names the run its resume continues."""
        return {"version": self.version}

    def adopt(self, version: int | str, owner: str) -> bool:
        """Use the checkpoint's `version` (a resume continues its run); False, and said why, when a
        version was given or this run already has its directory."""
        if self._requested is not None or self._path is not None:
            mine = self._requested if self._path is None else self._version
            if mine != version:
                info(f"{owner}: logging to version {mine!r}, not the checkpoint's {version!r}")
            return mine == version
        self._requested = version
        return True

    @property
    def where(self) -> Path:
        """The run directory if made, else the folder it will be made in (for messages)."""
        return self._path if self._path is not None else self.root / self.name

    @property
    def version(self) -> int | str | None:
        self._resolve()
        return self._version


def claim_version(base: Path) -> tuple[int, Path]:
    """Make `base/version_N` for the lowest N above those taken; a directory another process made
    first moves this one on to N + 1."""
    taken = [
        int(name[8:]) for name in os.listdir(base) if name.startswith("version_") and name[8:].isdecimal()
    ]
    n = max(taken, default=-1) + 1
    while True:
        path = base / f"version_{n}"
        try:
            path.mkdir()
        except FileExistsError:
            n += 1
            continue
        return n, path


STALE_AFTER_S = 600.0
_SWEPT: set[str] = set()  # the folders this process has swept (`sweep_run_temporaries_once`)
os.register_at_fork(after_in_child=_SWEPT.clear)  # a forked child is a next process: it sweeps again


def sweep_run_temporaries_once(base: Path) -> None:
    """`remove_stale_run_temporaries(base)` the first time this process resolves a run under `base`.

    The sweep lists every run directory, so it costs a fit time in proportion to the runs already
    there; a process that fits again (a notebook, a tuner, a sweep) pays it once. What it would find
    the second time is only a writer that died since and is already `STALE_AFTER_S` old: the next
    process removes it.
    """
    key = os.path.realpath(base)  # the folder itself: "link/.." is not where abspath puts it
    if key not in _SWEPT:
        _SWEPT.add(key)
        remove_stale_run_temporaries(base)


def remove_stale_run_temporaries(base: Path) -> list[Path]:
    """Remove temporaries of dead writers (a checkpoint or metrics file being written when its
    process was killed) from every run directory under `base` and their subdirectories.

    Only files untouched for `STALE_AFTER_S`: a writer on another host has a pid this host cannot see.
    One listing per directory; a directory that cannot be listed (removed meanwhile, no permission)
    is passed over: the sweep is best effort.
    """
    removed: list[Path] = []
    for run in _run_directories(base):
        found, subdirectories = _swept(run)
        removed += found
        for sub in subdirectories:
            removed += _swept(sub)[0]
    return removed


def _run_directories(base: Path) -> list[Path]:
    """The directories in `base`: its own files are no run's, left as they are."""
    from ..checkpoint import is_directory

    try:
        with os.scandir(base) as entries:
            return [Path(entry.path) for entry in entries if is_directory(entry)]
    except OSError:
        return []


def _swept(folder: Path) -> tuple[list[Path], list[Path]]:
    from ..checkpoint import sweep_folder

    try:
        return sweep_folder(folder, older_than=STALE_AFTER_S)
    except OSError:
        return [], []
