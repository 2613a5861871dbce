"""`save_hyperparameters()` and `hparams`, shared by Module and DataModule."""

from __future__ import annotations

import contextlib
import copy
import inspect
import pickle
from argparse import Namespace
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from types import FrameType
from typing import Any

import torch

from ..errors import CheckpointError, SurgeRuntimeError, SurgeTypeError, bad_value
from .instantiated import cli_recorded, rebuilt_arguments


class AttributeDict(dict):
    """A dict whose keys are also attributes: `hparams.lr` and `hparams["lr"]`."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError as err:
            raise AttributeError(f"no hyper-parameter named {key!r}; known: {sorted(self)}") from err

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value


# What the builder of an object (a config CLI) gives `save_hyperparameters()` in place of the
# `__init__` frame's arguments, while it builds it.
_GIVEN: ContextVar[dict[str, Any] | None] = ContextVar("surge_given_hyperparameters", default=None)


@contextlib.contextmanager
def given_hyperparameters(values: Mapping[str, Any]) -> Iterator[None]:
    """While the body builds an object, its `save_hyperparameters()` records `values` (a copy)
    instead of its `__init__`'s arguments: a CLI records the config that built it (Lightning's
    `LightningCLI` does so, adding `_instantiator`)."""
    token = _GIVEN.set(dict(values))
    try:
        yield
    finally:
        _GIVEN.reset(token)


class HyperparametersMixin:
    """Records the arguments of `__init__` so checkpoints and loggers can carry them."""

    def save_hyperparameters(
        self,
        *args: Any,
        ignore: str | Iterable[str] | None = None,
        frame: FrameType | None = None,
        logger: bool = True,
    ) -> None:
        """Save `__init__`'s arguments (all, the named ones, or one dict) into `self.hparams`, added
        to what an earlier call saved.
        `frame` is the `__init__` frame to read them from (default: the caller's); `logger=False`
        keeps them from the loggers (they are still saved in checkpoints)."""
        if not isinstance(logger, bool):
            raise SurgeTypeError(f"save_hyperparameters(logger={logger!r}): pass True or False")
        object.__setattr__(self, "_hparams_logged", logger)
        ignored = {ignore} if isinstance(ignore, str) else set(ignore or ())
        if len(args) == 1 and isinstance(args[0], Mapping | Namespace):
            values = dict(vars(args[0]) if isinstance(args[0], Namespace) else args[0])
        else:
            given = _GIVEN.get()
            if frame is None and given is None:
                here = inspect.currentframe()
                frame = here.f_back if here is not None else None
            init_args = dict(given) if given is not None else _collect_init_args(frame, self)
            if args:
                missing = [name for name in args if name not in init_args]
                if missing:
                    raise ValueError(
                        f"save_hyperparameters{args!r}: {missing} are not arguments of "
                        f"{type(self).__name__}.__init__ (known: {sorted(init_args)})"
                    )
                values = {name: init_args[name] for name in args}
            else:
                values = init_args
        merged = (
            self.hparams
        )  # a second call (a subclass's after its parent's) adds to the first, as Lightning's
        merged.update(values)
        for name in ignored:  # ignoring a name drops it even if an earlier call saved it
            merged.pop(name, None)
        object.__setattr__(self, "_hparams_initial", _frozen_copy(merged))

    @property
    def hparams_initial(self) -> AttributeDict:
        """A copy of what `save_hyperparameters()` saved, as it saved it (later changes to
        `hparams` are not in it), as Lightning's."""
        return _frozen_copy(self.__dict__.get("_hparams_initial", AttributeDict()))

    @property
    def hparams_logged(self) -> bool:
        """Whether the loggers receive `hparams` when fit starts (`save_hyperparameters(logger=...)`)."""
        return bool(self.__dict__.get("_hparams_logged", True))

    @property
    def hparams(self) -> AttributeDict:
        """The saved hyper-parameters (empty until `save_hyperparameters()` runs)."""
        if "_hparams" not in self.__dict__:
            object.__setattr__(self, "_hparams", AttributeDict())
        return self.__dict__["_hparams"]


def _frozen_copy(values: AttributeDict) -> AttributeDict:
    """A deep copy, or, for values that cannot be copied (a process, a lock, a list nested past the
    recursion limit), a copy of the dict holding them as they are."""
    try:
        return copy.deepcopy(values)
    except (RecursionError, TypeError, copy.Error, AttributeError):
        return AttributeDict(values)


def logged_hparams(module: HyperparametersMixin, datamodule: HyperparametersMixin | None) -> dict[str, Any]:
    """What the loggers receive when a run starts: the module's hyper-parameters and the datamodule's
    (each unless saved with `logger=False`), merged as Lightning merges them; a key both hold with
    different values is refused. A CLI's `_class_path` is left out."""
    own = dict(module.hparams) if module.hparams_logged else {}
    data = dict(datamodule.hparams) if datamodule is not None and datamodule.hparams_logged else {}
    clashing = sorted(
        key for key in own.keys() & data.keys()
        if key != "_class_path" and (type(own[key]) is not type(data[key]) or _differ(own[key], data[key]))
    )  # fmt: skip
    if clashing:
        raise SurgeRuntimeError(
            f"Error while merging hparams: the keys {clashing} are present in both the module's "
            f"({type(module).__name__}) and the datamodule's ({type(datamodule).__name__}) hparams but have "
            "different values; rename one, or save one with save_hyperparameters(logger=False)."
        )
    return {k: v for k, v in {**own, **data}.items() if k != "_class_path"}


def _differ(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return a is not b
    try:
        return bool(a != b)
    except (TypeError, ValueError, RuntimeError):  # no single truth value (an array): the same object only
        return a is not b


def _collect_init_args(frame: FrameType | None, obj: object) -> dict[str, Any]:
    """The arguments of the `__init__` that called, and of each `__init__` of `obj` that called it
    in turn (a subclass's), the outermost's winning, as Lightning collects them: a parent that
    saves them records what its subclass passed up."""
    levels: list[dict[str, Any]] = []
    while frame is not None and _is_init_of(frame, obj):
        levels.append(_frame_args(frame))
        frame = frame.f_back
    merged: dict[str, Any] = {}
    for args in levels:  # innermost (the parent) first; its subclass's values override
        merged.update(args)
    return merged


def _is_init_of(frame: FrameType, obj: object) -> bool:
    code = frame.f_code
    return (
        code.co_name == "__init__" and code.co_argcount > 0 and frame.f_locals.get(code.co_varnames[0]) is obj
    )


def _frame_args(frame: FrameType) -> dict[str, Any]:
    """A frame's named arguments (but `self`) as they stand, `**kwargs` spread in, `*args` left out."""
    code, local_vars = frame.f_code, frame.f_locals
    n = code.co_argcount + code.co_kwonlyargcount
    names = list(code.co_varnames[1:n])
    if code.co_flags & inspect.CO_VARARGS:
        n += 1  # *args: not named, not saved
    values = {name: local_vars[name] for name in names if name in local_vars}
    if code.co_flags & inspect.CO_VARKEYWORDS:
        values.update(local_vars.get(code.co_varnames[n], {}))
    return values


def _parent_init_names(cls: type[Any]) -> set[str]:
    """The argument names of the `__init__`s of `cls`'s hyper-parameter-saving parents."""
    return {
        name
        for base in cls.__mro__[1:]
        if issubclass(base, HyperparametersMixin) and "__init__" in vars(base)
        for name in inspect.signature(vars(base)["__init__"]).parameters
    } - {"self", "args", "kwargs"}


PLAIN_DEPTH = 100  # containers nested deeper are written as a note, as Python's repr writes a cycle


def plain(value: Any, _open: tuple[int, ...] = ()) -> Any:
    """Hyper-parameters as plain data (for checkpoints and YAML): containers and scalars kept,
    tensors as lists, anything else as its repr (a container inside itself as `...`, like repr)."""
    if isinstance(value, Mapping | list | tuple):
        if id(value) in _open:
            return "..."
        if len(_open) >= PLAIN_DEPTH:
            return f"<{type(value).__name__} nested over {PLAIN_DEPTH} deep>"
        inner = (*_open, id(value))
        if isinstance(value, Mapping):
            return {str(k): plain(v, inner) for k, v in value.items()}
        return [plain(v, inner) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if hasattr(value, "tolist") and callable(value.tolist):
        listed = value.tolist()
        if type(listed).__module__ != "numpy":  # np.longdouble's is itself: no Python number holds it
            return listed
    return repr(value)


OBJECTS_KEY = (
    "hyper_parameters_objects"  # in the checkpoint's "surge" entry: {"keys": [...], "pickle": bytes}
)


def objects_entry(hparams: Mapping[str, Any]) -> dict[str, Any] | None:
    """The hyper-parameters `plain` stores as their repr (a class, an object), pickled by reference
    for a load the user trusts (`load_from_checkpoint(..., weights_only=False)`): bytes, which a
    weights-only load reads without running anything. None when all are plain data or they do not
    pickle (a lambda, a class defined inside a function)."""
    keys = sorted(k for k, v in hparams.items() if not _plain_data(v))
    if not keys:
        return None
    try:
        data = pickle.dumps({k: hparams[k] for k in keys})
    except (pickle.PicklingError, AttributeError, TypeError, RecursionError):
        return None
    return {"keys": keys, "pickle": data}


def put_objects(hparams: Mapping[str, Any], checkpoint: dict[str, Any]) -> None:
    """`objects_entry` into the checkpoint's "surge" entry, when there is one."""
    entry = objects_entry(hparams)
    if entry is not None:
        checkpoint.setdefault("surge", {})[OBJECTS_KEY] = entry


def trusted_objects(entry: Any, where: str) -> dict[str, Any]:
    """The objects `objects_entry` saved, made again: runs code from the checkpoint (unpickling)."""
    if not isinstance(entry, Mapping) or not isinstance(entry.get("pickle"), bytes):
        return {}
    try:
        objects = pickle.loads(entry["pickle"])  # noqa: S301 - weights_only=False: a file the user trusts
    except Exception as err:
        raise CheckpointError(
            f"{where}: the hyper-parameters {entry.get('keys')} cannot be made again ({err})"
        ) from err
    return dict(objects) if isinstance(objects, dict) else {}


def _plain_data(value: Any, _open: tuple[int, ...] = ()) -> bool:
    """Whether `value` is data a weights-only load keeps as it is (a container that holds itself, or
    nests deeper than `plain` follows, is not)."""
    if isinstance(value, Mapping | list | tuple):
        if id(value) in _open or len(_open) >= PLAIN_DEPTH:
            return False
        inner = (*_open, id(value))
        if isinstance(value, Mapping):
            return all(isinstance(k, str) and _plain_data(v, inner) for k, v in value.items())
        return all(_plain_data(v, inner) for v in value)
    return (
        value is None
        or isinstance(value, bool | int | float | str)
        or callable(getattr(value, "tolist", None))
    )


def init_kwargs(cls: type[Any], saved: Any, overrides: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The saved hyper-parameters with `overrides` on top, checked against `cls.__init__`: a
    checkpoint of another class or version is refused with what differs, not a bare TypeError."""
    where = f"{cls.__name__}.load_from_checkpoint({source!r})"
    if not isinstance(saved, Mapping):
        raise CheckpointError(
            f"{where}: the checkpoint's 'hyper_parameters' is a {type(saved).__name__}, not a dict of "
            f"{cls.__name__}.__init__ arguments."
        )
    params = [p for name, p in inspect.signature(cls.__init__).parameters.items() if name != "self"]
    own = {p.name for p in params}
    # Saved by a parent's save_hyperparameters from what this class passed up: not this class's to take.
    saved = {k: v for k, v in saved.items() if k in own or k not in _parent_init_names(cls)}
    kwargs = {**saved, **overrides}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    if (
        not takes_any
    ):  # saved values __init__ does not take (save_hyperparameters({...})) are left out, as Lightning
        kwargs = {k: v for k, v in kwargs.items() if k in named or k in overrides}
    unknown = [] if takes_any else sorted(set(kwargs) - named)
    missing = [
        p.name
        for p in params
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and p.default is p.empty
        and p.name not in kwargs
    ]
    if unknown or missing:
        problems = [f"unknown arguments {unknown}"] * bool(unknown) + [f"missing arguments {missing}"] * bool(
            missing
        )
        raise CheckpointError(
            f"{where}: the checkpoint's hyper_parameters do not fit {cls.__name__}.__init__ "
            f"({'; '.join(problems)}; it takes {sorted(named)}). The checkpoint was saved by another class or "
            f"version: pass missing values as keyword arguments, or build the model yourself and load its "
            "'state_dict'."
        )
    return kwargs


def build_from_checkpoint(
    cls: type[Any],
    ckpt: Mapping[str, Any],
    source: str,
    weights_only: bool | None,
    overrides: Mapping[str, Any],
) -> Any:
    """`cls(**hyper-parameters)` from a loaded checkpoint (`overrides` on top). Its classes and
    objects are their repr unless `weights_only=False` makes them from the file's pickle; a model
    that cannot be built from a repr says which hyper-parameters and the remedy."""
    if weights_only not in (None, True, False):
        raise bad_value(
            f"{cls.__name__}.load_from_checkpoint(weights_only)", weights_only, "None, True or False"
        )
    where = f"{cls.__name__}.load_from_checkpoint({source!r})"
    saved = ckpt.get("hyper_parameters", {})
    own = ckpt.get("surge")
    entry = own.get(OBJECTS_KEY) if isinstance(own, Mapping) else None
    if weights_only is False and isinstance(saved, Mapping):
        saved = {**saved, **trusted_objects(entry, where)}
    if cli_recorded(saved):  # recorded by LightningCLI: its keys out, class paths built (nothing imported)
        saved = rebuilt_arguments(cls, saved, source)
    kwargs = init_kwargs(cls, saved, overrides, source)
    as_repr = [] if weights_only is False or not isinstance(entry, Mapping) else list(entry.get("keys", []))
    as_repr = [k for k in as_repr if k in kwargs and k not in overrides]
    try:
        return cls(**kwargs)
    except Exception as err:
        if not as_repr:
            raise
        raise CheckpointError(
            f"{where}: {cls.__name__}(...) failed ({type(err).__name__}: {err}); the hyper-parameters {as_repr} "
            "are classes or objects, which a weights-only load reads as their repr. Pass weights_only=False "
            "to make them from the file (it runs code from the file: only for a file you trust), or pass "
            "them as keyword arguments."
        ) from err
