"""`lightning.pytorch.core.saving`: the file helpers projects import from it. `get_filesystem` and
`pl_load` are those of `lightning.fabric.utilities.cloud_io`; the rest is refused by name."""

from __future__ import annotations

from ..fabric_utilities.cloud_io import _load as pl_load
from ..fabric_utilities.cloud_io import get_filesystem
from ..refuse import module_getattr

_WHY = "surge writes hparams.yaml itself; read it with yaml.safe_load"
__getattr__ = module_getattr(
    "lightning.pytorch.core.saving",
    {
        "load_hparams_from_yaml": _WHY, "save_hparams_to_yaml": _WHY,
        "load_hparams_from_tags_csv": _WHY, "save_hparams_to_tags_csv": _WHY,
        "update_hparams": "update model.hparams (a dict) directly",
    },
)  # fmt: skip

__all__ = ["get_filesystem", "pl_load"]
