"""Lightning names surge has no counterpart for: refused by name, with the reason, never faked."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from ..errors import SurgeError

DOCS = "docs/lightning.md lists every name the Lightning mode provides"


class LightningNameError(SurgeError, ImportError):
    """A Lightning name or module that surge does not provide."""


class RefusedAttributeError(SurgeError, AttributeError):
    """An attribute asked of a stand-in class: an AttributeError (so `hasattr` answers False and
    `getattr(cls, name, default)` gives the default) that carries the stand-in's refusal."""


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


class RefusedClass:
    """A stand-in for a Lightning class: importable, usable as a base, an annotation or in
    `isinstance`/`issubclass`, and refused by name when called (constructed) or asked for a public
    attribute. It is no class object itself: as a base (`__mro_entries__`) it gives a plain class whose
    construction refuses, so a user's class may derive from it together with any other base or metaclass."""

    def __init__(self, module: str, name: str, message: str) -> None:
        def __new__(cls: type, *args: object, **kwargs: object) -> NoReturn:
            raise LightningNameError(message)

        doc = f"Refused: {message}"
        base = type(name, (), {"__new__": __new__, "__module__": module, "__doc__": doc, "_refusal": message})
        for attr, value in (("_refusal", message), ("_base", base), ("__name__", name), ("__qualname__", name),
                            ("__module__", module), ("__doc__", doc)):  # fmt: skip
            object.__setattr__(self, attr, value)

    def __call__(self, *args: object, **kwargs: object) -> NoReturn:
        raise LightningNameError(self._refusal)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):  # the interpreter's and libraries' probes: a plain miss
            raise AttributeError(attr)
        raise RefusedAttributeError(self._refusal)

    def __mro_entries__(self, bases: tuple[object, ...]) -> tuple[type]:
        return (self._base,)

    def __instancecheck__(self, obj: object) -> bool:
        return isinstance(obj, self._base)

    def __subclasscheck__(self, cls: type) -> bool:
        return isinstance(cls, type) and issubclass(cls, self._base)

    def __repr__(self) -> str:
        return f"<class '{self.__module__}.{self.__name__}'>"


def refused_class(module: str, name: str, message: str) -> Any:
    """A class standing for Lightning's `module.name` (a `RefusedClass`): importable and subclassable;
    constructing it (or a subclass) raises `message`; `isinstance(x, it)` is False for anything surge makes."""
    return RefusedClass(module, name, message)
