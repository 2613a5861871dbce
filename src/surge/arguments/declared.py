"""One declaration per Trainer argument: `TrainerConfig`'s fields. The Trainer's signature and its
read-only argument views are generated from them, so a name, a type or a default is written once.

How type checkers and tools see the generated parts:
- `takes_arguments_of(TrainerConfig)` types `Trainer.__init__` with a `ParamSpec`: mypy and IDEs see
  the config's keyword-only parameters (names, accepted types, which have defaults), and it sets a
  real `__signature__` and `__annotations__` (evaluated types) for `inspect.signature`,
  `typing.get_type_hints` and jsonargparse (LightningCLI, `surge fit --config`).
  (`typing.dataclass_transform` on the Trainer was the other way; it would also make every config
  field a Trainer attribute of the *accepted* type, which is not what `trainer.precision` etc. are.)
- `Resolves[Accepted, Resolved]` is a field whose caller may pass more than a reader gets (None for
  Lightning's default, "1:00:00" for a duration): the dataclass `__init__` takes `Accepted`,
  reading the validated config gives `Resolved` (PEP 681 descriptor-typed fields, which mypy knows).
- `argument_view(TrainerConfig.name)` is a read-only Trainer property returning the validated value.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from ..errors import SurgeTypeError, did_you_mean

A = TypeVar("A")
R = TypeVar("R")
T = TypeVar("T")
P = ParamSpec("P")


class Resolves(Generic[A, R]):
    """A dataclass field given as `A` and read, once validated, as `R`; `default` is what the
    signature shows. The value lives in the instance's `__dict__` under the field's own name."""

    def __init__(self, default: A) -> None:
        self.default = default

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: Any) -> Resolves[A, R]: ...
    @overload
    def __get__(self, obj: object, owner: Any) -> R: ...
    def __get__(self, obj: object | None, owner: Any) -> Any:
        return self.default if obj is None else obj.__dict__[self.name]  # class access: the default

    def __set__(self, obj: object, value: A) -> None:
        obj.__dict__[self.name] = value


class ArgumentView(Generic[T]):
    """A read-only property of the Trainer: the validated value of the config field of its name
    (read from the owner's `_cfg`)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: Any) -> ArgumentView[T]: ...
    @overload
    def __get__(self, obj: object, owner: Any) -> T: ...
    def __get__(self, obj: Any, owner: Any) -> Any:
        return self if obj is None else getattr(obj._cfg, self.name)

    def __set__(self, obj: object, value: object) -> None:
        raise AttributeError(f"property {self.name!r} of {type(obj).__name__!r} object has no setter")


@overload
def argument_view(field: Resolves[Any, R]) -> ArgumentView[R]: ...
@overload
def argument_view(field: T) -> ArgumentView[T]: ...
def argument_view(field: Any) -> Any:
    """`max_steps = argument_view(TrainerConfig.max_steps)`: the argument typed from its field (the
    value passed is only read by type checkers; the view's name is the attribute's)."""
    return ArgumentView()


def signature_of(config: type) -> inspect.Signature:
    """The keyword-only parameters of `config`'s init fields, in their order, with their defaults
    and their accepted types (evaluated: the classes they name are imported by then)."""
    hints = typing.get_type_hints(config, localns=_annotation_names())
    params = [
        inspect.Parameter(
            f.name, inspect.Parameter.KEYWORD_ONLY, default=_default(f), annotation=_accepted(hints[f.name])
        )
        for f in dataclasses.fields(config)
        if f.init
    ]
    return inspect.Signature(params, return_annotation=None)


def takes_arguments_of(
    config: Callable[P, Any],
) -> Callable[[Callable[..., None]], Callable[Concatenate[Any, P], None]]:
    """Decorate `__init__(self, **kwargs)`: its signature becomes `config`'s (see the module's doc);
    a call it does not fit fails as Python's own would, naming the class's `__init__`."""

    def declare(init: Callable[..., None]) -> Callable[Concatenate[Any, P], None]:
        sig = signature_of(config)  # type: ignore[arg-type]
        self = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        full = sig.replace(parameters=[self, *sig.parameters.values()])

        def checked(*args: Any, **kwargs: Any) -> None:
            try:
                full.bind(*args, **kwargs)
            except TypeError as err:
                unknown = next((k for k in kwargs if k not in full.parameters), None)
                hint = "" if unknown is None else did_you_mean(unknown, sig.parameters)
                raise SurgeTypeError(f"{init.__qualname__}() {err}{hint}") from None
            init(*args, **kwargs)

        for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
            setattr(checked, attr, getattr(init, attr))
        checked.__signature__ = full  # type: ignore[attr-defined]
        checked.__annotations__ = {**{p.name: p.annotation for p in sig.parameters.values()}, "return": None}
        return checked

    return declare


def _default(field: dataclasses.Field[Any]) -> Any:
    factory = field.default_factory
    return field.default if factory is dataclasses.MISSING else factory()


def _accepted(hint: Any) -> Any:
    return typing.get_args(hint)[0] if typing.get_origin(hint) is Resolves else hint


def _annotation_names() -> dict[str, Any]:
    """The classes the config's annotations name, imported when the signature is built (after the
    config has loaded: the strategies and precision packages import `config.registry`)."""
    from ..accelerators.base import Accelerator
    from ..callbacks.base import Callback
    from ..loggers.base import Logger
    from ..precision.base import Precision
    from ..speed.activation_checkpointing import CheckpointPolicy, Policy
    from ..strategies.base import Strategy

    return {
        "Accelerator": Accelerator, "Callback": Callback, "Logger": Logger, "Precision": Precision, "Strategy": Strategy,
        "CheckpointPolicy": CheckpointPolicy, "Policy": Policy, "Resolves": Resolves,
    }  # fmt: skip
