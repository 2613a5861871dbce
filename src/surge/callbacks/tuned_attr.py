"""Where a tuner callback finds and sets a hyper-parameter, as Lightning's `lightning_hasattr` /
`lightning_setattr` do: an attribute of the module, a key of its `hparams`, or the same on the
datamodule."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any


def _holders(module: Any, datamodule: Any, name: str) -> list[tuple[Any, bool]]:
    """(object, is_mapping) pairs that hold `name`, in Lightning's order."""
    found: list[tuple[Any, bool]] = []
    for owner in (module, datamodule):
        if owner is None:
            continue
        if name in vars(owner) or isinstance(getattr(type(owner), name, None), property):
            found.append((owner, False))
            continue
        hparams = getattr(owner, "hparams", None)
        if isinstance(hparams, MutableMapping) and name in hparams:
            found.append((hparams, True))
        elif hparams is not None and not isinstance(hparams, MutableMapping) and hasattr(hparams, name):
            found.append((hparams, False))
    return found


def has_tuned_attr(module: Any, datamodule: Any, name: str) -> bool:
    return bool(_holders(module, datamodule, name))


def set_tuned_attr(module: Any, datamodule: Any, name: str, value: Any) -> None:
    """Set `name` wherever it is held (module, its hparams, the datamodule, its hparams)."""
    for holder, is_mapping in _holders(module, datamodule, name):
        if is_mapping:
            holder[name] = value
        else:
            setattr(holder, name, value)
