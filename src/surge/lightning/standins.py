"""Stand-ins for the Lightning 2.6.6 names surge does not provide: each imports (a script may import a
name and never use it, and may subclass a class at import time) and refuses, naming itself, the reason
and the alternative, when used: a class when constructed or asked for an attribute, a function when
called, a value when read in any way, a module's names as they are.

Which names exist comes from `names.py`; a name Lightning does not have fails as under Lightning."""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any, NoReturn

from . import names
from .refuse import LightningNameError, RefusedClass, refuse, refused_class

_INTERNAL = "one of Lightning's internals; surge's are its own: use the Trainer's public API"
_NO_FABRIC = "surge has no Fabric; write a LightningModule and use the Trainer"
# Lightning module prefix -> why surge has no such names and what to do instead (longest prefix wins).
REASONS: dict[str, str | None] = {  # None: the default reasons below
    "lightning.fabric": _NO_FABRIC,
    "lightning.fabric.utilities": None,
    "lightning.pytorch.loops": _INTERNAL,
    "lightning.pytorch.overrides": _INTERNAL,
    "lightning.pytorch.trainer.connectors": _INTERNAL,
    "lightning.pytorch.strategies.launchers": _INTERNAL,
    "lightning.pytorch.serve": "surge has no model serving; save the weights and serve them with your own code",
    "lightning.pytorch.utilities.deepspeed": "surge does not run DeepSpeed; Trainer(strategy='fsdp') shards instead",
    "lightning.pytorch.demos.mnist_datamodule": (
        "the MNIST demo downloads its data; use torchvision's MNIST or the BoringDataModule demo"
    ),
}
_PRIVATE = "a private name of Lightning's; surge's insides are its own"
_DEFAULT = "surge has no counterpart"


def reason(module: str, name: str) -> str:
    """Why `module.name` (a Lightning name) is not provided, with the alternative."""
    module = names.canonical(module)
    found = [p for p in REASONS if module == p or module.startswith(p + ".")]
    given = REASONS[max(found, key=len)] if found else None
    if given:
        return given
    return _PRIVATE if name.startswith("_") else _DEFAULT


def refused_function(module: str, name: str, message: str) -> Callable[..., NoReturn]:
    """A function standing for Lightning's `module.name` that raises `message` when called."""

    def refused(*args: object, **kwargs: object) -> NoReturn:
        raise LightningNameError(message)

    refused.__name__ = refused.__qualname__ = name
    refused.__module__, refused.__doc__ = module, f"Refused: {message}"
    refused.refusal = message  # type: ignore[attr-defined]
    return refused


class RefusedValue:
    """A value standing for Lightning's constant or object: any use (truth, call, attribute, item,
    iteration, length, comparison by order) raises the refusal; `repr` says what it is."""

    def __init__(self, message: str) -> None:
        object.__setattr__(self, "_message", message)

    def _refuse(self, *args: object, **kwargs: object) -> NoReturn:
        raise LightningNameError(object.__getattribute__(self, "_message"))

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        self._refuse()

    def __repr__(self) -> str:
        return f"<refused: {object.__getattribute__(self, '_message')}>"

    __bool__ = __call__ = __iter__ = __len__ = __getitem__ = __contains__ = __setattr__ = _refuse
    __lt__ = __le__ = __gt__ = __ge__ = __int__ = __float__ = __index__ = _refuse


Submodule = Callable[[str], types.ModuleType]  # Lightning's module name -> what the mode gives for it


@functools.cache
def standin(module: str, name: str, submodule: Submodule, message: str | None = None) -> object:
    """The stand-in for Lightning's `module.name` (one object per name, whatever its spelling); a
    submodule is what `submodule` gives (surge's module, or a stand-in one). `message` overrides the refusal."""
    module = names.canonical(module)
    which = names.kind(module, name)
    if which is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    if which == "m":
        return submodule(f"{module}.{name}")
    if which == "v":
        found = _flag(module, name, submodule)
        if found is not None:
            return found
    message = message or str(refuse(module, name, reason(module, name)))
    make = {"c": refused_class, "f": refused_function}.get(which)
    return make(module, name, message) if make else RefusedValue(message)


# Where Lightning's version and availability flags (`_TORCH_GREATER_EQUAL_2_3`, `_IS_WINDOWS`) come from:
# the other modules that have one import it from here (the same object, in Lightning 2.6.6).
FLAGS = ("lightning.fabric.utilities.imports", "lightning.pytorch.utilities.imports")


def _flag(module: str, name: str, submodule: Submodule) -> object | None:
    """surge's value for a flag `module` re-exports from Lightning's `imports` modules; None if none."""
    for source in FLAGS:
        if source != module and names.kind(source, name) == "v":
            value = getattr(submodule(source), name)
            if refusal(value) is None:
                return value
    return None


def refusal(obj: object) -> str | None:
    """The refusal a stand-in raises when used; None for anything else (a name surge provides)."""
    if isinstance(obj, RefusedValue):
        return str(object.__getattribute__(obj, "_message"))
    if isinstance(obj, StandInModule):
        return obj.__doc__
    if isinstance(obj, RefusedClass):  # (a subclass of a stand-in is the user's own class: None)
        return str(object.__getattribute__(obj, "_refusal"))
    found = getattr(obj, "refusal", None) if isinstance(obj, types.FunctionType) else None
    return found if isinstance(found, str) else None


class StandInModule(types.ModuleType):
    """A Lightning module surge has none of: importable; its names are stand-ins; others are misses."""

    submodule: Submodule

    def __getattr__(self, name: str) -> object:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return standin(self.__name__, name, self.submodule)


@functools.cache
def standin_module(fullname: str, submodule: Submodule) -> StandInModule:
    """The stand-in for Lightning's module `fullname` (one per module, whatever its spelling);
    `submodule` gives its submodules."""
    module = names.canonical(fullname)
    made = StandInModule(module, f"Lightning's `{module}`: surge has none of it ({reason(module, '')}).")
    made.__path__ = []  # a package, so its submodules import through the finder
    made.submodule = submodule
    return made


def with_fallback(
    module: types.ModuleType, behind: Callable[[], tuple[str, ...]], submodule: Submodule
) -> types.ModuleType:
    """Give surge's `module`, which stands for the Lightning modules `behind()` (asked on a miss only),
    Lightning's other names:
    a name its own `__getattr__` lacks or refuses is a stand-in when Lightning has it (keeping the
    module's own reason), else a miss as under Lightning: an `AttributeError` (with the module's reason,
    if it has one), so `hasattr`/`getattr(m, name, None)` answer as they do there. Idempotent; returns `module`."""
    own = module.__dict__.get("__getattr__")
    if getattr(own, "lightning_fallback", False):
        return module

    def __getattr__(name: str) -> object:
        message = None
        if own is not None:
            try:
                return own(name)
            except LightningNameError as err:
                message = str(err)
            except AttributeError:
                pass
        if not (name.startswith("__") and name.endswith("__")):
            for lightning_module in behind():
                if names.kind(lightning_module, name):
                    return standin(lightning_module, name, submodule, message)
        if message:  # a name Lightning 2.6.6 lacks too (its apps, the MNIST demo)
            raise AttributeError(message)
        raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")

    __getattr__.lightning_fallback = True  # type: ignore[attr-defined]
    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    return module
