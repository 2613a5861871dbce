"""Hyper-parameters a config CLI recorded, built into `__init__` arguments again.

Lightning's `LightningCLI` saves the config that built a module (or datamodule) as its
hyper-parameters with `_instantiator: "lightning.pytorch.cli.instantiate_module"` (and, in subclass
mode, `_class_path`); a class-typed argument is saved as its config, `{"class_path": ..., "init_args":
...}`. `load_from_checkpoint` then builds those arguments from their class paths, as Lightning does.
Loading a checkpoint never imports anything it names: the instantiator is a name from a fixed list,
not imported, and each class path must name a class already imported (the checkpoint is refused
otherwise, naming the key)."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Mapping
from typing import Any

from ..errors import CheckpointError, UntrustedCheckpointError, install_hint
from ..rank_zero import warn

INSTANTIATOR_KEY = "_instantiator"
CLASS_PATH_KEY = "_class_path"
# What Lightning's CLI writes as the instantiator (also the names Lightning itself trusts).
TRUSTED_INSTANTIATORS = (
    "lightning.pytorch.cli.instantiate_module",
    "pytorch_lightning.cli.instantiate_module",
)


def cli_recorded(saved: Any) -> bool:
    """Whether `saved` hyper-parameters were recorded by a CLI (they name an instantiator)."""
    return isinstance(saved, Mapping) and INSTANTIATOR_KEY in saved


def rebuilt_arguments(cls: type, saved: Mapping[str, Any], source: str) -> dict[str, Any]:
    """`saved` without the CLI's keys, only the arguments `cls.__init__` takes (as Lightning), and
    each `{"class_path": ...}` value built into its object."""
    where = f"{cls.__name__}.load_from_checkpoint({source!r})"
    instantiator = saved[INSTANTIATOR_KEY]
    if instantiator not in TRUSTED_INSTANTIATORS:
        raise UntrustedCheckpointError(
            f"{where}: the checkpoint's hyper-parameter {INSTANTIATOR_KEY}={instantiator!r} is not a trusted "
            f"instantiator ({', '.join(TRUSTED_INSTANTIATORS)}); it was refused so that loading runs no code "
            "the checkpoint names. Build the model yourself and load its 'state_dict'."
        )
    class_path = saved.get(CLASS_PATH_KEY)
    if class_path is not None and not _imported_subclass(class_path, cls):
        raise UntrustedCheckpointError(
            f"{where}: {CLASS_PATH_KEY}={class_path!r} is not an imported subclass of {cls.__name__}; import "
            "the module that defines it before loading."
        )
    values = {k: v for k, v in saved.items() if k not in (INSTANTIATOR_KEY, CLASS_PATH_KEY)}
    params = inspect.signature(cls.__init__).parameters  # type: ignore[misc]
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        dropped = sorted(set(values) - set(params))
        if dropped:
            warn(
                f"{where}: {dropped} are not arguments of {cls.__name__} (saved for {class_path}); left out."
            )
        values = {k: v for k, v in values.items() if k in params}
    for key, value in values.items():
        _check_imported(value, f"{where}: hyper-parameter {key!r}")
    return _instantiate(cls, values) if _has_class_path(values) else values


def _imported_subclass(class_path: Any, cls: type) -> bool:
    if not isinstance(class_path, str) or "." not in class_path:
        return False
    module, _, name = class_path.rpartition(".")
    found = getattr(sys.modules.get(module), name, None)
    return isinstance(found, type) and issubclass(found, cls)


def _check_imported(value: Any, where: str) -> None:
    """Refuse a `class_path` anywhere in `value` that does not name an already imported class."""
    if isinstance(value, Mapping):
        path = value.get("class_path")
        if path is not None and not _imported_subclass(path, object):
            raise UntrustedCheckpointError(
                f"{where}: class_path {path!r} does not name an imported class; loading a checkpoint imports "
                "nothing it names. Import it first, or pass the argument to load_from_checkpoint."
            )
        for inner in value.values():
            _check_imported(inner, where)
    elif isinstance(value, list | tuple):
        for inner in value:
            _check_imported(inner, where)


def _has_class_path(value: Any) -> bool:
    if isinstance(value, Mapping):
        return "class_path" in value or any(_has_class_path(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_class_path(v) for v in value)
    return False


def _instantiate(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """`values` parsed against `cls.__init__` by jsonargparse, class-typed ones built, `cls` not."""
    try:
        from jsonargparse import ArgumentError, ArgumentParser
    except ImportError as err:
        raise CheckpointError(
            f"{cls.__name__}.load_from_checkpoint: the checkpoint's hyper-parameters name classes to build "
            f"({CLASS_PATH_KEY} or class_path), which needs jsonargparse: {install_hint('cli')}"
        ) from err
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(cls, "module", fail_untyped=False)
    try:
        cfg = parser.parse_object({"module": values})
    except ArgumentError as err:
        raise CheckpointError(
            f"{cls.__name__}.load_from_checkpoint: the checkpoint's hyper-parameters do not fit "
            f"{cls.__name__}.__init__: {err}"
        ) from err
    if hasattr(parser, "instantiate"):
        return parser.instantiate(cfg, instantiators=[(_arguments, cls, False)]).module
    parser.add_instantiator(_arguments, cls, subclasses=False)  # jsonargparse before 4.50
    return parser.instantiate_classes(cfg).module


def _arguments(class_type: type, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """In place of building `class_type`: the keyword arguments it would get."""
    return kwargs
