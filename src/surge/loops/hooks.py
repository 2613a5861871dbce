"""Calling hooks: only those the Module or a Callback actually overrides."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..callbacks.base import CALLBACK_HOOKS, Callback, overrides
from ..module import HOOKS, Module


class Hooks:
    """Per hook, the bound methods to call, found once per run.

    Callbacks get `(trainer, module, *args)`; the Module gets `(*args)`. The Module runs first, so
    what it logs in an epoch-end hook is visible to the callbacks that decide on it.
    """

    def __init__(self, trainer: Any, module: Module, callbacks: Sequence[Callback]) -> None:
        self.trainer = trainer
        self.module_fns: dict[str, Callable[..., Any]] = {
            name: getattr(module, name) for name in HOOKS if overrides(module, Module, name)
        }
        self.callback_fns: dict[str, list[Callable[..., Any]]] = {}
        for name in CALLBACK_HOOKS:
            fns = [getattr(cb, name) for cb in callbacks if overrides(cb, Callback, name)]
            if fns:
                self.callback_fns[name] = fns
        self._module = module

    def module(self, name: str, *args: Any) -> Any:
        fn = self.module_fns.get(name)
        return fn(*args) if fn is not None else None

    def callbacks(self, name: str, *args: Any) -> None:
        for fn in self.callback_fns.get(name, ()):
            fn(self.trainer, self._module, *args)

    def call(self, name: str, *args: Any) -> Any:
        """Module hook, then callbacks; returns the module hook's result."""
        result = self.module(name, *args)
        self.callbacks(name, *args)
        return result

    def any(self, name: str) -> bool:
        return name in self.module_fns or name in self.callback_fns
