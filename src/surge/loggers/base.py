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


def versioned_dir(root: Path, name: str, version: int | str | None) -> tuple[Path, int | str]:
    """`root/name/version_N` with the next free N (or the given version)."""
    base = root / name
    if version is None:
        taken = [
            int(p.name.split("_", 1)[1]) for p in base.glob("version_*") if p.name.split("_", 1)[1].isdigit()
        ]
        version = max(taken, default=-1) + 1
    folder = base / (version if isinstance(version, str) else f"version_{version}")
    return folder, version
