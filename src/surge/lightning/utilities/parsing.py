"""`lightning.pytorch.utilities.parsing`: `AttributeDict` (what `hparams` is), `is_picklable` and
`get_init_args`; Lightning's other frame-reading helpers are refused by name."""

from __future__ import annotations

import inspect
import pickle
import types
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


def get_init_args(frame: types.FrameType) -> dict[str, Any]:
    """The arguments of the `__init__` running in `frame`, by name, with its `**kwargs` spread in and
    `self`, `*args` and `**kwargs` themselves left out; {} for a frame that is not a class's `__init__`
    (one that does not reference `__class__`, as `super()` does). Lightning's helper."""
    local = frame.f_locals
    cls = local.get("__class__")
    if cls is None or frame.f_code.co_name != "__init__":
        return {}
    params = list(inspect.signature(cls.__init__).parameters.values())
    special = {params[0].name} if params else set()
    special |= {p.name for p in params if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    found = {p.name: local[p.name] for p in params}
    for p in params:
        if p.kind is p.VAR_KEYWORD:
            found.update(found.get(p.name) or {})
    skip = special | {"__class__", "frame", "frame_args"}
    return {name: value for name, value in found.items() if name not in skip}


_FRAMES = "it reads a caller's frame; call self.save_hyperparameters() in __init__ and read self.hparams"
_ATTRS = "set the attribute on the module (or its hparams) directly"
__getattr__: Any = module_getattr(
    "lightning.pytorch.utilities.parsing",
    {
        "collect_init_args": _FRAMES, "save_hyperparameters": _FRAMES,
        "parse_class_init_keys": _FRAMES, "clean_namespace": _FRAMES,
        "lightning_getattr": _ATTRS, "lightning_hasattr": _ATTRS, "lightning_setattr": _ATTRS,
    },
)  # fmt: skip

__all__ = ["AttributeDict", "get_init_args", "is_picklable"]
