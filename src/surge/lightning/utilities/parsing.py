"""`lightning.pytorch.utilities.parsing`: `AttributeDict` (what `hparams` is) and `is_picklable`;
Lightning's frame-reading helpers are refused by name."""

from __future__ import annotations

import pickle
from typing import Any

from ...module.hparams import AttributeDict
from ..refuse import module_getattr


def is_picklable(obj: object) -> bool:
    """Whether `obj` pickles."""
    try:
        pickle.dumps(obj)
    except (pickle.PickleError, AttributeError, RecursionError, TypeError):
        return False
    return True


_FRAMES = "it reads a caller's frame; call self.save_hyperparameters() in __init__ and read self.hparams"
_ATTRS = "set the attribute on the module (or its hparams) directly"
__getattr__: Any = module_getattr(
    "lightning.pytorch.utilities.parsing",
    {
        "get_init_args": _FRAMES, "collect_init_args": _FRAMES, "save_hyperparameters": _FRAMES,
        "parse_class_init_keys": _FRAMES, "clean_namespace": _FRAMES,
        "lightning_getattr": _ATTRS, "lightning_hasattr": _ATTRS, "lightning_setattr": _ATTRS,
    },
)  # fmt: skip

__all__ = ["AttributeDict", "is_picklable"]
