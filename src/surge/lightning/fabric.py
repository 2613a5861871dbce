"""`lightning.fabric`: surge has no Fabric. `Fabric` (and `is_wrapped`) import, so a script that
only names them loads, and are refused when used; `seed_everything` is Lightning's. The Fabric
utilities Lightning scripts import live in `lightning.fabric.utilities` (`fabric_utilities/`)."""

from __future__ import annotations

from .refuse import refuse, refused_at_use
from .seeding import seed_everything

__version__ = "2.6.6"  # as lightning.__version__: the release whose behaviour the mode reproduces
_NO_FABRIC = "surge has no Fabric; write a LightningModule and use the Trainer"
Fabric = refused_at_use("lightning.fabric", "Fabric", _NO_FABRIC)
is_wrapped = refused_at_use("lightning.fabric", "is_wrapped", _NO_FABRIC)


def __getattr__(name: str) -> object:
    if name.startswith("__") or name == "utilities":  # the import system's questions; a submodule
        raise AttributeError(name)
    raise refuse("lightning.fabric", name, _NO_FABRIC)


__all__ = ["Fabric", "is_wrapped", "seed_everything"]
