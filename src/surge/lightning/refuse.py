"""Lightning names surge has no counterpart for: refused by name, with the reason, never faked."""

from __future__ import annotations

from collections.abc import Callable

from ..errors import SurgeError

DOCS = "docs/lightning.md lists every name the Lightning mode provides"


class LightningNameError(SurgeError, ImportError):
    """A Lightning name or module that surge does not provide."""


def refuse(module: str, name: str, reason: str = "surge has no counterpart") -> LightningNameError:
    """The error for `from <module> import <name>`."""
    return LightningNameError(f"{module}.{name} is not provided by surge ({reason}); {DOCS}.")


def module_getattr(module: str, refused: dict[str, str]) -> Callable[[str], object]:
    """A module-level `__getattr__` that refuses Lightning's names in `refused` (name -> reason) and
    its private ones (`_load_from_checkpoint`: surge's insides are other), and reports any other
    missing name as an AttributeError."""

    def __getattr__(name: str) -> object:
        if name in refused:
            raise refuse(module, name, refused[name])
        if name.startswith("_") and not name.startswith("__"):
            raise refuse(module, name, "a private name of Lightning's; surge's insides are its own")
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


def refused_at_use(module: str, name: str, reason: str) -> type:
    """A stand-in for Lightning's `module.name` that imports (a script may import it and never use
    it) but refuses, naming it, when called or constructed; `isinstance(x, it)` is always False."""

    def __new__(cls: type, *args: object, **kwargs: object) -> None:
        raise refuse(module, name, reason)

    return type(name, (), {"__new__": __new__, "__module__": module, "__doc__": f"Refused: {reason}."})
