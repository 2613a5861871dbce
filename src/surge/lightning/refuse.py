"""Lightning names surge has no counterpart for: refused by name, with the reason, never faked."""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, NoReturn

from ..errors import SurgeError

DOCS = "docs/lightning.md lists every name the Lightning mode provides"


class LightningNameError(SurgeError, ImportError):
    """A Lightning name or module that surge does not provide."""


def refuse(module: str, name: str, reason: str = "surge has no counterpart") -> LightningNameError:
    """The error for `from <module> import <name>`."""
    return LightningNameError(f"{module}.{name} is not provided by surge ({reason}); {DOCS}.")


def module_getattr(module: str, refused: dict[str, str]) -> Callable[[str], object]:
    """A module-level `__getattr__` that refuses Lightning's names in `refused` (name -> reason) and
    reports any other missing name as an AttributeError. In the Lightning mode a name Lightning has
    imports as a stand-in that refuses with this reason when used (`standins.with_fallback`)."""

    def __getattr__(name: str) -> object:
        if name in refused:
            raise refuse(module, name, refused[name])
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


def refused_at_use(module: str, name: str, reason: str) -> type:
    """A stand-in for Lightning's `module.name` that imports (a script may import it and never use
    it) but refuses, naming it, when called or constructed; `isinstance(x, it)` is always False."""
    return refused_class(module, name, str(refuse(module, name, reason)))


class RefusedMeta(abc.ABCMeta):
    """The stand-in classes' type: asking one (or a subclass) for a public attribute it lacks refuses."""

    _refusal: str

    def __getattr__(cls, attr: str) -> Any:
        if attr.startswith("_"):  # the interpreter's and libraries' probes: a plain miss
            raise AttributeError(attr)
        raise LightningNameError(cls._refusal)


def refused_class(module: str, name: str, message: str) -> type:
    """A class standing for Lightning's `module.name`: importable and subclassable; constructing it
    (or a subclass) raises `message`; `isinstance(x, it)` is False for anything surge makes."""

    def __new__(cls: type, *args: object, **kwargs: object) -> NoReturn:
        raise LightningNameError(message)

    doc = f"Refused: {message}"
    body = {"__new__": __new__, "__module__": module, "__doc__": doc, "_refusal": message}
    return RefusedMeta(name, (), body)
