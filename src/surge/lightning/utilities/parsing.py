"""`lightning.pytorch.utilities.parsing`: `AttributeDict` (what `hparams` is), `is_picklable`,
`clean_namespace`, the `__init__`-argument helpers (`parse_class_init_keys`, `get_init_args`,
`collect_init_args`) and `lightning_hasattr`/`getattr`/`setattr` (an attribute of the module, its
hparams, the datamodule or its hparams, as tuners look one up); `save_hyperparameters` is refused by
name (call the module's method)."""

from __future__ import annotations

import inspect
import pickle
import types
from collections.abc import MutableMapping
from typing import Any

from ...module.hparams import AttributeDict
from ..refuse import module_getattr
from .rank_zero import rank_zero_warn


def is_picklable(obj: object) -> bool:
    """Whether `obj` pickles."""
    try:
        pickle.dumps(obj)
    except (pickle.PickleError, AttributeError, RecursionError, RuntimeError, TypeError):
        return False
    return True


def clean_namespace(hparams: MutableMapping) -> None:
    """Remove (with a warning naming each) the entries of `hparams` that do not pickle."""
    for key in [k for k, v in hparams.items() if not is_picklable(v)]:
        rank_zero_warn(
            f"Attribute '{key}' removed from hparams because it cannot be pickled. You can suppress this warning by"
            f" setting `self.save_hyperparameters(ignore=['{key}'])`.",
        )
        del hparams[key]


def parse_class_init_keys(cls: type) -> tuple[str, str | None, str | None]:
    """The names `cls.__init__` gives `self`, its `*args` and its `**kwargs` (None for one it lacks)."""
    params = list(inspect.signature(cls.__init__).parameters.values())  # type: ignore[misc]
    star = next((p.name for p in params if p.kind is p.VAR_POSITIONAL), None)
    double = next((p.name for p in params if p.kind is p.VAR_KEYWORD), None)
    return params[0].name, star, double


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


def collect_init_args(
    frame: types.FrameType,
    path_args: list[dict[str, Any]],
    inside: bool = False,
    classes: tuple[type, ...] = (),
) -> list[dict[str, Any]]:
    """The arguments of each `__init__` on the stack from `frame` outwards (the chain of `super().__init__`
    calls, limited to instances of `classes` when given) appended to `path_args`: the last is the
    most specific class's."""
    back = frame.f_back
    while isinstance(back, types.FrameType):
        local = frame.f_locals
        if "__class__" in local:
            params = list(inspect.signature(local["__class__"].__init__).parameters)
            owner = local.get(params[0]) if params and frame.f_code.co_name == "__init__" else None
            if not classes or isinstance(owner, classes):
                path_args.append(get_init_args(frame))
                inside = True
                frame, back = back, back.f_back
                continue
        if inside:
            break
        frame, back = back, back.f_back
    return path_args


def _holders(model: Any, attribute: str) -> list[Any]:
    """What holds `attribute`, in Lightning's order: the module, its hparams, the Trainer's datamodule, its hparams."""
    found = [model] if hasattr(model, attribute) else []
    if hasattr(model, "hparams") and attribute in model.hparams:
        found.append(model.hparams)
    trainer = getattr(model, "_trainer", None)
    datamodule = getattr(trainer, "datamodule", None) if trainer is not None else None
    if datamodule is not None:
        if hasattr(datamodule, attribute):
            found.append(datamodule)
        if hasattr(datamodule, "hparams") and attribute in datamodule.hparams:
            found.append(datamodule.hparams)
    return found


_NOWHERE = "{} is neither stored in the model namespace nor the `hparams` namespace/dict, nor the datamodule."


def lightning_hasattr(model: Any, attribute: str) -> bool:
    """Whether the module, its hparams or the datamodule (or its hparams) holds `attribute`."""
    return bool(_holders(model, attribute))


def lightning_getattr(model: Any, attribute: str) -> Any:
    """`attribute` from the last of its holders (the datamodule's over the module's); AttributeError if none."""
    found = _holders(model, attribute)
    if not found:
        raise AttributeError(_NOWHERE.format(attribute))
    holder = found[-1]
    return holder[attribute] if isinstance(holder, dict) else getattr(holder, attribute)


def lightning_setattr(model: Any, attribute: str, value: Any) -> None:
    """Set `attribute` in every holder; AttributeError if none holds it."""
    found = _holders(model, attribute)
    if not found:
        raise AttributeError(_NOWHERE.format(attribute))
    for holder in found:
        if isinstance(holder, dict):
            holder[attribute] = value
        else:
            setattr(holder, attribute, value)


__getattr__: Any = module_getattr(
    "lightning.pytorch.utilities.parsing",
    {
        "save_hyperparameters": "call self.save_hyperparameters() in the module's __init__ and read self.hparams"
    },
)

__all__ = [
    "AttributeDict",
    "clean_namespace",
    "collect_init_args",
    "get_init_args",
    "is_picklable",
    "lightning_getattr",
    "lightning_hasattr",
    "lightning_setattr",
    "parse_class_init_keys",
]
