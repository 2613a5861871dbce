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
    from .standins import refused_class

    return refused_class(module, name, str(refuse(module, name, reason)))
