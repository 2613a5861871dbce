"""`lightning.pytorch.utilities.exceptions` (and `lightning.fabric.utilities.exceptions`):
`MisconfigurationException` is surge's `MisconfigurationError`, the error surge raises for an
argument or a hook's return value it cannot use, so `except MisconfigurationException` catches it."""

from __future__ import annotations

from ...errors import MisconfigurationError as MisconfigurationException
from ..refuse import module_getattr

__getattr__ = module_getattr(
    "lightning.pytorch.utilities.exceptions",
    {"SIGTERMException": "surge stops on SIGTERM with a checkpoint and surge.launch.signals.Preempted"},
)

__all__ = ["MisconfigurationException"]
