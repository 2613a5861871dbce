"""`lightning.pytorch.utilities.model_helpers.is_overridden`: whether a module, datamodule or
callback defines its own `method_name` (surge calls only the hooks that are)."""

from __future__ import annotations

from lightning_utilities.core.overrides import is_overridden as _overridden

from ...callbacks import Callback
from ...datamodule import DataModule
from ...module import Module
from ..refuse import module_getattr

__getattr__ = module_getattr(
    "lightning.pytorch.utilities.model_helpers",
    {"get_torchvision_model": "build it with torchvision.models.get_model(name, **kwargs)"},
)


def is_overridden(method_name: str, instance: object | None = None, parent: type | None = None) -> bool:
    """True when `instance`'s class defines `method_name` differently from `parent` (by default the
    LightningModule, LightningDataModule or Callback it is); False for `instance=None`."""
    if instance is None:
        return False
    if parent is None:
        parent = next((base for base in (Module, DataModule, Callback) if isinstance(instance, base)), None)
        if parent is None:
            raise ValueError(
                f"is_overridden({method_name!r}, {type(instance).__name__}): pass parent= (the class "
                "to compare with); instance is not a LightningModule, LightningDataModule or Callback"
            )
    return _overridden(method_name, instance, parent)


__all__ = ["is_overridden"]
