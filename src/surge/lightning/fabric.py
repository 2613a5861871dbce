"""`lightning.fabric`: surge has no Fabric. Only the two utility modules Lightning scripts import
from here for `lightning.pytorch`'s sake are provided (`lightning.fabric.utilities.exceptions`,
`lightning.fabric.utilities.warnings`); every name of the package itself is refused."""

from __future__ import annotations

from .refuse import refuse

UTILITIES = ("exceptions", "warnings")


def __getattr__(name: str) -> object:
    if name.startswith("__"):  # the import system's questions (`__path__`, ...) are not Lightning names
        raise AttributeError(name)
    raise refuse("lightning.fabric", name, "surge has no Fabric; write a LightningModule and use the Trainer")
