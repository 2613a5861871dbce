"""Launching: where ranks come from (torchrun, SLURM, surge's own subprocesses)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config.lazy_names import LazyNames

if TYPE_CHECKING:
    from .environment import ClusterEnvironment, detect
    from .subprocess_launcher import SubprocessLauncher, free_port

_NAMES = LazyNames(
    __name__,
    {
        "ClusterEnvironment": "environment",
        "detect": "environment",
        "SubprocessLauncher": "subprocess_launcher",
        "free_port": "subprocess_launcher",
    },
)
_NAMES.install(globals())

__all__ = ["ClusterEnvironment", "SubprocessLauncher", "detect", "free_port"]
