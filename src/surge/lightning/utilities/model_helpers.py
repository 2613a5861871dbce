"""`lightning.pytorch.utilities.model_helpers.is_overridden`: whether a module, datamodule or
callback defines its own `method_name` (surge calls only the hooks that are)."""

from __future__ import annotations

import functools
import inspect
import os
from typing import Any

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
                f"Expected a parent: is_overridden({method_name!r}, {type(instance).__name__}) needs parent= (the class "
                "to compare with); instance is not a LightningModule, LightningDataModule or Callback"
            )
    return _overridden(method_name, instance, parent)


class _restricted_classmethod(classmethod):  # noqa: N801  (Lightning's name, used as a decorator)
    """A classmethod that raises TypeError when called on an instance (`model.load_from_checkpoint(...)`
    would discard its result); callable on the class, inspectable through either."""

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        method = self.__func__
        cls = owner if owner is not None else type(instance)

        @functools.wraps(method)
        def bound(*args: Any, **kwargs: Any) -> Any:
            if instance is not None and not _scripting():
                raise TypeError(
                    f"The classmethod `{cls.__name__}.{method.__name__}` cannot be called on an instance."
                    " Please call it on the class type and make sure the return value is used."
                )
            return method(cls, *args, **kwargs)

        bound.__func__ = method  # type: ignore[attr-defined]
        return bound


def _scripting() -> bool:
    """Whether TorchScript is compiling the caller (it looks methods up on instances)."""
    return any(os.path.join("torch", "jit") in frame.filename for frame in inspect.stack())


__all__ = ["is_overridden"]
