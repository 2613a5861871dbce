"""Under `--allow_class_paths`: a `class_path` may build only a class of the type its argument declares.

The prefixes (config/guard.py) say whose code a config may name; this says what it may build with it.
jsonargparse calls whatever a class_path names: a function (one that runs a file), `functools.partial`,
or any class at all where the argument is typed `Any` or `object`. So under an allowlist every
class_path in the parsed config must name a class that inherits (not merely registers with an ABC)
from a class its argument's annotation names: the parameter of the command's parser, or of the
enclosing class's `__init__` for nested `init_args`. An argument typed `Any`, `object`, a bare
`Callable` or not at all takes no class_path, nor does `dict_kwargs`; a function or class named by
an import string (which the parser resolves at a `Callable` or `type[...]` argument) must be under
an allowed prefix, unless it is the class's own default.
"""

from __future__ import annotations

import importlib
import inspect
import typing
from collections import abc
from collections.abc import Callable, Iterable
from types import UnionType
from typing import Any

from .guard import ClassPathPolicy, ConfigRefused, class_paths

UNKNOWN: Any = inspect.Parameter.empty  # an argument whose annotation is not known takes no class_path
CONTAINERS = (
    list,
    tuple,
    set,
    frozenset,
    abc.Iterable,
    abc.Sequence,
    abc.MutableSequence,
    abc.Collection,
    abc.Set,
)
MAPPINGS = (dict, abc.Mapping, abc.MutableMapping)


def declared_types(parser: Any) -> list[tuple[str, Any]]:
    """Each argument of a jsonargparse parser and the annotation it was declared with."""
    return [(a.dest, a._typehint) for a in parser._actions if hasattr(a, "_typehint")]  # jsonargparse's


def check_targets(cfg: Any, declared: Iterable[tuple[str, Any]], policy: ClassPathPolicy) -> None:
    """Refuse a parsed config (before anything is built) whose class_paths would build anything but
    a class of their argument's declared type."""
    seen: set[str] = set()
    for dest, hint in declared:
        value = cfg.get(dest) if hasattr(cfg, "get") else None
        if value is not None:
            _walk(value, hint, dest, policy, seen)
    for where, path in class_paths(cfg, ""):
        if where not in seen:
            _refuse(path, where, "sits where no declared argument type says what it may be")


def _walk(value: Any, hint: Any, where: str, policy: ClassPathPolicy, seen: set[str]) -> None:
    items = _mapping(value)
    if items is not None and isinstance(items.get("class_path"), str):
        _walk_spec(items, hint, where, policy, seen)
    elif items is not None:
        for key, item in items.items():
            _walk(item, _value_type(hint, key), f"{where}.{key}", policy, seen)
    elif isinstance(value, list | tuple):
        element = _element_type(hint)
        for i, item in enumerate(value):
            _walk(item, element, f"{where}[{i}]", policy, seen)
    elif isinstance(value, str) and "." in value and _names_code(hint):
        policy.check(value, where)
    elif callable(value) and not isinstance(value, str):  # what the parser resolved from an import string
        policy.check(_import_path(value), where)


def _walk_spec(items: dict[str, Any], hint: Any, where: str, policy: ClassPathPolicy, seen: set[str]) -> None:
    seen.add(where)
    cls = _check_spec(items["class_path"], hint, where)
    for key, item in (_mapping(items.get("init_args")) or {}).items():
        if item is not _default(cls, key):  # a default comes from the class's code, not the config
            _walk(item, parameter_type(cls, key), f"{where}.init_args.{key}", policy, seen)
    for key, item in (_mapping(items.get("dict_kwargs")) or {}).items():
        _walk(item, UNKNOWN, f"{where}.dict_kwargs.{key}", policy, seen)


def _check_spec(path: str, hint: Any, where: str) -> type:
    target = _resolve(path)
    if not inspect.isclass(target):
        kind = type(target).__name__
        _refuse(
            path,
            where,
            f"names a {kind}, not a class: under --allow_class_paths a class_path must be a class",
        )
    bases, takes_anything = _classes(hint)
    if not any(base in target.__mro__ for base in bases):
        if not bases and takes_anything:
            _refuse(path, where, f"is given to an argument typed {_name(hint)}, which takes no class_path "
                    "under --allow_class_paths (declare the class it expects)")  # fmt: skip
        expected = " or ".join(_name(b) for b in bases) or _name(hint)
        _refuse(path, where, f"is not a subclass of {expected}, the argument's declared type")
    return target


def parameter_type(cls: type, key: str) -> Any:
    """The annotation of `key` in `cls.__init__`, following `**kwargs` up the MRO (UNKNOWN if none)."""
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        try:
            params = inspect.signature(init).parameters
        except (TypeError, ValueError):
            return UNKNOWN
        param = params.get(key)
        if param is not None and param.kind not in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            try:
                return typing.get_type_hints(init).get(key, UNKNOWN)
            except Exception:  # an annotation that does not resolve: its type is not known
                return UNKNOWN
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return UNKNOWN
    return UNKNOWN


def _default(cls: type, key: str) -> Any:
    """The default of `key` in `cls.__init__` (or up the MRO), UNKNOWN if it has none."""
    for klass in cls.__mro__:
        try:
            param = inspect.signature(klass.__dict__["__init__"]).parameters.get(key)
        except (KeyError, TypeError, ValueError):
            continue
        if param is not None:
            return param.default
    return UNKNOWN


def _classes(hint: Any) -> tuple[list[type], bool]:
    """The classes `hint` names (a class_path must inherit from one), and whether it takes anything."""
    if hint is UNKNOWN or hint is Any or hint is object or isinstance(hint, typing.TypeVar | str):
        return [], True
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union or origin is UnionType:
        found = [_classes(arg) for arg in args]
        return [c for cs, _ in found for c in cs], any(anything for _, anything in found)
    if origin is typing.Annotated:
        return _classes(args[0])
    if origin is Callable or hint is Callable:  # Callable[..., R]: a class of R, built or partial
        return _classes(args[-1]) if args else ([], True)
    if origin is None and inspect.isclass(hint) and hint is not type(None):
        return [hint], False
    return [], False  # containers, Literal, None, type[...]: a class_path is not built there


def _value_type(hint: Any, key: str) -> Any:
    """The type of `key` in a mapping value of `hint`: a class's parameter, or a dict's values."""
    bases, _ = _classes(hint)
    if len(bases) == 1:
        return parameter_type(bases[0], key)
    for member in _members(hint):
        if typing.get_origin(member) in MAPPINGS and typing.get_args(member):
            return typing.get_args(member)[-1]
    return UNKNOWN


def _element_type(hint: Any) -> Any:
    """The union of the element types of the list/tuple members of `hint` (UNKNOWN if none)."""
    elements = [
        arg
        for member in _members(hint)
        if typing.get_origin(member) in CONTAINERS
        for arg in typing.get_args(member)
        if arg is not Ellipsis
    ]
    return typing.Union[tuple(elements)] if elements else UNKNOWN  # noqa: UP007


def _members(hint: Any) -> list[Any]:
    if typing.get_origin(hint) in (typing.Union, UnionType):
        return [m for arg in typing.get_args(hint) for m in _members(arg)]
    if typing.get_origin(hint) is typing.Annotated:
        return _members(typing.get_args(hint)[0])
    return [hint]


def _names_code(hint: Any) -> bool:
    """Whether a string at `hint` is an import path jsonargparse resolves (a callable or a class)."""
    return any(m is Callable or typing.get_origin(m) in (Callable, type) or m is type for m in _members(hint))


def _import_path(obj: Any) -> str:
    """Where a callable the parser resolved from an import string is defined."""
    return f"{getattr(obj, '__module__', None)}.{getattr(obj, '__qualname__', type(obj).__qualname__)}"


def _resolve(path: str) -> Any:
    """The object `path` names (its module is already imported by the parser, and allowed)."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name, None)
        return obj
    return None


def _name(hint: Any) -> str:
    if hint is UNKNOWN:
        return "nothing (no annotation)"
    if inspect.isclass(hint):
        return f"{hint.__module__}.{hint.__qualname__}"
    return str(hint).replace("typing.", "")


def _refuse(path: str, where: str, why: str) -> typing.NoReturn:
    raise ConfigRefused(
        f"class_path {path!r} at {where} {why}. Nothing was built. With --allow_class_paths a "
        "class_path must name a class that inherits from the type its argument declares"
    )


def _mapping(value: Any) -> dict[str, Any] | None:
    if isinstance(value, dict):
        return value
    return dict(vars(value)) if type(value).__name__ == "Namespace" else None
