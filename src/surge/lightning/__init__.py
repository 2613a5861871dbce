"""Lightning's names on surge's objects: what `import lightning as L`, `lightning.pytorch` and
`pytorch_lightning` give a script run by `surge run train.py` (or `python -m surge.lightning`).

`LightningModule` is `surge.Module`, `LightningDataModule` is `surge.DataModule`, `Trainer` is
`surge.Trainer`: a layer of names, not a second trainer. Submodules: `callbacks`, `loggers`,
`cli`, `utilities`, `demos`, `core`. A Lightning name surge has no counterpart for imports
and is refused by name when used (docs/lightning.md lists what is provided).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from ..callbacks import Callback
from ..datamodule import DataModule as LightningDataModule
from ..module import Module as LightningModule
from ..trainer import Trainer
from .refuse import refuse
from .seeding import seed_everything
from .utilities import disable_possible_user_warnings

# The Lightning release whose behaviour the mode reproduces: a project's version gate
# (`Version(pl.__version__) >= Version("2.0")`) takes the branch it takes under that Lightning.
# surge's own version is `surge.__version__`.
__version__ = "2.6.6"

SUBMODULES = (
    "accelerators", "callbacks", "cli", "core", "demos", "loggers", "plugins", "profilers", "strategies", "tuner",
    "utilities",
)  # fmt: skip
REFUSED = {  # Lightning's other names (its other subpackages, ...) are stand-ins in the mode: standins.py
    "LightningWork": "surge has no Lightning apps",
    "LightningFlow": "surge has no Lightning apps",
    "LightningApp": "surge has no Lightning apps",
}


def cli_lightning_logo() -> None:
    """Lightning prints its logo here; surge prints nothing."""


def __getattr__(name: str) -> Any:
    if name in SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name == "_logger":  # Lightning's "lightning.pytorch" logger, set up as Lightning sets it up
        from .utilities.rank_zero import _logger

        return _logger
    if name == "pytorch":  # `import lightning as L; L.pytorch.Trainer`
        return importlib.import_module(__name__)
    if name == "Fabric":  # `lightning.Fabric` is `lightning.fabric.Fabric`
        from .fabric import Fabric

        return Fabric
    if name in REFUSED:
        raise refuse("lightning", name, REFUSED[name])
    raise AttributeError(f"module 'lightning.pytorch' has no attribute {name!r}")


def _on_import() -> None:
    """As Lightning's package does when it is imported (or reloaded): `POSSIBLE_USER_WARNINGS=0` (or
    "off") silences `PossibleUserWarning`s."""
    if os.environ.get("POSSIBLE_USER_WARNINGS", "").lower() in ("0", "off"):
        disable_possible_user_warnings()


_on_import()

__all__ = [
    "Callback",
    "LightningDataModule",
    "LightningModule",
    "Trainer",
    "__version__",
    "cli_lightning_logo",
    "seed_everything",
]
