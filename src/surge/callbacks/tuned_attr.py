"""Where a tuner callback finds and sets a hyper-parameter, as Lightning's `lightning_hasattr` /
`lightning_setattr` do: an attribute of the module, a key of its `hparams`, and the same on the
datamodule. The value is set in every place that holds the name; it is read from the last one."""

from __future__ import annotations

import warnings
from collections.abc import MutableMapping
from typing import Any

from ..errors import SurgeError


class TunedAttributeError(SurgeError, AttributeError):
    """The attribute a tuner sets is not on the module, its hparams or the datamodule (Lightning's
    AttributeError)."""


def _holds(owner: Any, name: str) -> bool:
    return hasattr(owner, name)  # as Lightning: a class attribute or property counts


def _holders(module: Any, datamodule: Any, name: str) -> list[tuple[Any, bool]]:
    """(object, is_mapping) pairs that hold `name`, in Lightning's order."""
    found: list[tuple[Any, bool]] = []
    for owner in (module, datamodule):
        if owner is None:
            continue
        if _holds(owner, name):
            found.append((owner, False))
        hparams = getattr(owner, "hparams", None)
        if isinstance(hparams, MutableMapping) and name in hparams:
            found.append((hparams, True))
        elif hparams is not None and not isinstance(hparams, MutableMapping) and hasattr(hparams, name):
            found.append((hparams, False))
    return found


def has_tuned_attr(module: Any, datamodule: Any, name: str) -> bool:
    return bool(_holders(module, datamodule, name))


def get_tuned_attr(module: Any, datamodule: Any, name: str) -> Any:
    """The value held last (the datamodule's over the module's, hparams over the attribute)."""
    holder, is_mapping = _holders(module, datamodule, name)[-1]
    return holder[name] if is_mapping else getattr(holder, name)


def set_tuned_attr(module: Any, datamodule: Any, name: str, value: Any) -> None:
    """Set `name` wherever it is held (module, its hparams, the datamodule, its hparams)."""
    for holder, is_mapping in _holders(module, datamodule, name):
        if is_mapping:
            holder[name] = value
        else:
            setattr(holder, name, value)


def warn_if_held_twice(module: Any, name: str) -> None:
    """Lightning's warning when the module holds `name` both as an attribute and in its hparams."""
    hparams = getattr(module, "hparams", None)
    if _holds(module, name) and hparams is not None and name in hparams:
        warnings.warn(
            f"Field `model.{name}` and `model.hparams.{name}` are mutually exclusive! `model.{name}` is used "
            f"as the initial value; remove one of them if that is not what you want.",
            UserWarning,
            stacklevel=3,
        )
