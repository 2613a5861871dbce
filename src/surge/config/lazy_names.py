"""A package's public names, each imported from its module when first read.

A package whose `__init__` imported every module made `from surge.callbacks import ModelCheckpoint`
load all of them (and their imports): a default fit paid for the pipeline strategies, the
tuners and every callback it never used. With `LazyNames` the package's `__getattr__` imports
only the module a name lives in, once; `dir()` and `from package import *` still see every name.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from typing import Any


class LazyNames:
    """Name -> module (relative to `package`) for one package; its `__init__` calls
    `install(globals())` and imports the same names under `if TYPE_CHECKING:` for type checkers."""

    def __init__(self, package: str, where: Mapping[str, str]) -> None:
        self.package = package
        self.where = dict(where)

    def install(self, namespace: dict[str, Any]) -> None:
        """Make this the package's `__getattr__` and `__dir__`. Set at run time, where a type
        checker does not look: one that read a module `__getattr__` would make every attribute
        `Any`, and pass a misspelt name."""
        namespace["__getattr__"], namespace["__dir__"] = self.attribute, self.listing

    def attribute(self, name: str) -> Any:
        """The name's value, its module imported now (a module's `__getattr__`)."""
        module = self.where.get(name)
        if module is None:
            return self.submodule(name)
        value = getattr(importlib.import_module(f".{module}", self.package), name)
        setattr(importlib.import_module(self.package), name, value)  # once: later reads are plain
        return value

    def submodule(self, name: str) -> Any:
        """The package's submodule `name`, imported now: `import surge.callbacks` then
        `surge.callbacks.checkpoint` finds it, as when the package imported every module."""
        full = f"{self.package}.{name}"
        if name.isidentifier() and not name.startswith("__") and importlib.util.find_spec(full) is not None:
            return importlib.import_module(full)
        raise AttributeError(f"module {self.package!r} has no attribute {name!r}")

    def listing(self) -> list[str]:
        """Every name, loaded or not (a module's `__dir__`), and every name in `__all__`."""
        names = vars(importlib.import_module(self.package))
        return sorted({*names, *self.where, *names.get("__all__", ())})

    def load_all(self) -> None:
        """Import every module (a registry's built-ins register themselves when imported)."""
        for name in self.where:
            self.attribute(name)
