"""Launching: where ranks come from (torchrun, SLURM, surge's own subprocesses)."""

from .environment import ClusterEnvironment, detect
from .subprocess_launcher import SubprocessLauncher, free_port

__all__ = ["ClusterEnvironment", "SubprocessLauncher", "detect", "free_port"]
