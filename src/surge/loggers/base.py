"""The Logger interface: where metrics and hyper-parameters go. Only rank zero writes."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


class Logger:
    """Receives host floats at log intervals; never tensors, never per step unless asked."""

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def version(self) -> int | str | None:
        return None

    @property
    def log_dir(self) -> Path | None:
        """The run directory where this logger writes (checkpoints go under it by default)."""
        return None

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        raise NotImplementedError

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        """Record the run's hyper-parameters."""

    def save(self) -> None:
        """Flush what is buffered."""

    def finalize(self, status: str) -> None:
        """Close files at the end of a run ("success", "failed" or "interrupted")."""
        self.save()


class RunDir:
    """`save_dir/name/version_N`: the next free N unless a version is given; made on first use
    (so a Trainer that never logs creates nothing)."""

    def __init__(self, save_dir: str | Path, name: str, version: int | str | None) -> None:
        self.root, self.name, self._requested = Path(save_dir), name, version
        self._path: Path | None = None
        self._version: int | str | None = None

    def _resolve(self) -> Path:
        if self._path is None:
            base = self.root / self.name
            version = self._requested
            if version is None:
                taken = [int(p.name[8:]) for p in base.glob("version_*") if p.name[8:].isdigit()]
                version = max(taken, default=-1) + 1
            self._path = base / (version if isinstance(version, str) else f"version_{version}")
            self._path.mkdir(parents=True, exist_ok=True)
            self._version = version
        return self._path

    @property
    def path(self) -> Path:
        return self._resolve()

    @property
    def version(self) -> int | str | None:
        self._resolve()
        return self._version
