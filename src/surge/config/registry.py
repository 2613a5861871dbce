"""Names for `Trainer(strategy=...)` and `Trainer(precision=...)`: each plugin file registers its own.

A registry maps a name (and its aliases) to a class. The built-in plugins register themselves when
their module is imported. A lookup of a name not registered yet imports them all first (the
package's `load_all`, where its modules load lazily), so a lookup always sees them, and a run that
names only the default never imports the others.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterable
from typing import TypeVar

from ..errors import MisconfigurationError

C = TypeVar("C", bound=type)


class Registry:
    """Name -> class for one Trainer argument; aliases resolve to a name."""

    def __init__(self, argument: str, package: str) -> None:
        self.argument, self.package = argument, package
        self._classes: dict[str, type] = {}
        self._keys: dict[str, str] = {}  # every accepted string -> its name
        self._loaded = False  # every built-in registered
        self._importing = False  # (a lookup while this thread imports them returns at once)
        self._lock = threading.RLock()  # another thread's first lookup waits for every built-in

    def add(self, name: str, cls: type, aliases: Iterable[str] = ()) -> None:
        """Register `cls` under `name` and `aliases`; a string already taken (by another class) is an error."""
        module = getattr(cls, "__module__", None)
        if not (isinstance(module, str) and module.startswith(f"{self.package}.")):
            self._load()  # a user's class: the built-ins first, so that a clash with one is named here
        keys = [name, *aliases]
        for key in keys:
            if not isinstance(key, str) or not key:
                raise MisconfigurationError(f"{self.argument} names are non-empty strings, not {key!r}.")
            if key in self._keys and self._classes[self._keys[key]] is not cls:
                taken = self._classes[self._keys[key]].__name__
                raise MisconfigurationError(
                    f"{self.argument}={key!r} is registered already (for {taken}); pick another name."
                )
        self._classes[name] = cls
        self._keys.update(dict.fromkeys(keys, name))

    def remove(self, name: str) -> None:
        """Forget `name` and its aliases (a built-in not loaded yet is loaded first, then forgotten)."""
        if name not in self._classes:
            self._load()
        self._classes.pop(name)
        self._keys = {k: v for k, v in self._keys.items() if v != name}

    def decorator(self, name: str, aliases: Iterable[str] = ()) -> Callable[[C], C]:
        def register(cls: C) -> C:
            self.add(name, cls, aliases)
            return cls

        return register

    def name_of(self, key: object) -> str | None:
        """The registered name `key` stands for, or None."""
        if not isinstance(key, str):
            return None
        if key not in self._keys:
            self._load()
        return self._keys.get(key)

    def get(self, name: str) -> type:
        if name not in self._classes:
            self._load()
        return self._classes[name]

    @property
    def names(self) -> tuple[str, ...]:
        self._load()
        return tuple(self._classes)

    @property
    def aliases(self) -> tuple[str, ...]:
        self._load()
        return tuple(k for k, v in self._keys.items() if k != v)

    def _load(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if self._loaded or self._importing:
                return
            self._importing = True
            try:
                package = importlib.import_module(self.package)  # the built-ins register themselves
                load_all = getattr(package, "load_all", None)  # (a package whose modules load lazily)
                if load_all is not None:
                    load_all()
            finally:
                self._importing, self._loaded = False, True


STRATEGIES = Registry("strategy", "surge.strategies")
PRECISIONS = Registry("precision", "surge.precision")


def register_strategy(name: str, *, aliases: Iterable[str] = ()) -> Callable[[C], C]:
    """Class decorator: `Trainer(strategy=name)` builds the class with `cls.from_layout(layout)`."""
    return STRATEGIES.decorator(name, aliases)


def register_precision(name: str, *, aliases: Iterable[str] = ()) -> Callable[[C], C]:
    """Class decorator: `Trainer(precision=name)` builds the class with `cls.from_name(name, device_type)`."""
    return PRECISIONS.decorator(name, aliases)
