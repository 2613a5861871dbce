"""`--optimizer` / `--lr_scheduler` as the module's `configure_optimizers` (Lightning's
`auto_configure_optimizers`): the parsed groups marked AUTOMATIC are built when the Trainer asks
the module for its optimizers, from the parameters it has then."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import MethodType
from typing import Any

from torch.optim import Optimizer

from ..errors import MisconfigurationError
from ..module import Module
from ..rank_zero import warn
from .cli_parser import AUTOMATIC, SCHEDULER_BASES, LightningArgumentParser, Registered, with_class_path

Configure = Callable[[Module, Optimizer, Any], Any]


def default_configure_optimizers(module: Module, optimizer: Optimizer, lr_scheduler: Any = None) -> Any:
    """Lightning's shape: the optimizer alone, `([opt], [sched])`, or a dict with the monitor of a
    ReduceLROnPlateau that has one."""
    if lr_scheduler is None:
        return optimizer
    if getattr(lr_scheduler, "monitor", None) is not None:
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": lr_scheduler, "monitor": lr_scheduler.monitor},
        }
    return [optimizer], [lr_scheduler]


def add_defaults(parser: LightningArgumentParser) -> None:
    """`--optimizer` and `--lr_scheduler` (any torch optimizer / scheduler) unless the subclass's
    `add_arguments_to_parser` added its own."""
    if not parser._optimizers:
        parser.add_optimizer_args((Optimizer,))
    if not parser._lr_schedulers:
        parser.add_lr_scheduler_args(SCHEDULER_BASES)


def install(
    model: Module, parser: LightningArgumentParser, config: Any, configure: Configure, cli: str
) -> None:
    """Give `model` a `configure_optimizers` built from the AUTOMATIC groups of the parsed `config`,
    when an optimizer was given; a scheduler without one is refused (Lightning drops it silently)."""
    optimizers = _automatic(parser._optimizers, (Optimizer,))
    schedulers = _automatic(parser._lr_schedulers, SCHEDULER_BASES)
    if len(optimizers) > 1 or len(schedulers) > 1:
        raise MisconfigurationError(
            f"{cli}: at most one optimizer and one lr_scheduler group can be 'AUTOMATIC', found "
            f"{optimizers + schedulers}; pass link_to=... for the others and write configure_optimizers."
        )
    optimizer = _init(parser._optimizers, optimizers, config)
    scheduler = _init(parser._lr_schedulers, schedulers, config)
    if optimizer is None:
        if scheduler is not None:
            raise MisconfigurationError(
                f"--{schedulers[0]}={scheduler['class_path']} was given without --{optimizers[0] if optimizers else 'optimizer'}: "
                "the scheduler needs an optimizer from the command line (e.g. --optimizer=SGD "
                "--optimizer.lr=0.1); a module's own configure_optimizers is not combined with it."
            )
        return
    if type(model).configure_optimizers is not Module.configure_optimizers:
        warn(
            f"`{type(model).__name__}.configure_optimizers` will be overridden by `{cli}.configure_optimizers`."
        )
    model.configure_optimizers = MethodType(_method(optimizer, scheduler, configure), model)  # type: ignore[method-assign]


def _automatic(register: Registered, bases: tuple[type, ...]) -> list[str]:
    keys = []
    for key, (classes, link_to) in register.items():
        classes = classes if isinstance(classes, tuple) else (classes,)
        if link_to == AUTOMATIC and any(issubclass(c, bases) for c in classes):
            keys.append(key)
    return keys


def _init(register: Registered, keys: list[str], config: Any) -> dict[str, Any] | None:
    """The chosen group's `{class_path, init_args}`, or None where it was not given."""
    if not keys:
        return None
    cls, value = register[keys[0]][0], config.get(keys[0])
    if isinstance(cls, tuple):
        return (
            None
            if value is None
            else {"class_path": value["class_path"], "init_args": _plain(value.get("init_args"))}
        )
    return with_class_path(cls, value)


def _plain(value: Any) -> dict[str, Any]:
    return dict(value.as_dict() if hasattr(value, "as_dict") else (value or {}))


def _method(
    optimizer: dict[str, Any], scheduler: dict[str, Any] | None, configure: Configure
) -> Callable[[Module], Any]:
    def configure_optimizers(module: Module) -> Any:
        opt = instantiate_class(module.parameters(), optimizer)
        sched = instantiate_class(opt, scheduler) if scheduler is not None else None
        return configure(module, opt, sched)

    return configure_optimizers


def instantiate_class(args: Any, init: dict[str, Any]) -> Any:
    """`init["class_path"]` called with `args` (one, or a tuple) and `init["init_args"]`."""
    module_name, name = init["class_path"].rsplit(".", 1)
    cls = getattr(importlib.import_module(module_name), name)
    positional = args if isinstance(args, tuple) else (args,)
    return cls(*positional, **init.get("init_args", {}))
