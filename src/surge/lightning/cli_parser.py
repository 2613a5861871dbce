"""`LightningArgumentParser`: jsonargparse's parser with Lightning's three additions.

`add_lightning_class_args(cls, key)` adds a Callback, Module, DataModule or Trainer class under
`--key.*` (a callback built this way joins the trainer's callbacks); `add_optimizer_args` and
`add_lr_scheduler_args` add `--optimizer` / `--lr_scheduler`, which `LightningCLI` turns into the
module's `configure_optimizers` (cli_optimizers.py). Imported only when a CLI is built, since
jsonargparse is an optional dependency.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from jsonargparse import ArgumentParser, Namespace, class_from_function
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from ..callbacks.base import Callback
from ..datamodule import DataModule
from ..errors import bad_value
from ..module import Module
from ..trainer import Trainer

AUTOMATIC = "AUTOMATIC"
Registered = dict[str, tuple[type | tuple[type, ...], str]]  # key -> (class or classes, link_to)


class ReduceLROnPlateau(torch.optim.lr_scheduler.ReduceLROnPlateau):
    """torch's ReduceLROnPlateau with the `monitor` it steps on (Lightning's, for `--lr_scheduler`)."""

    def __init__(self, optimizer: Optimizer, monitor: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(optimizer, *args, **kwargs)
        self.monitor = monitor


SCHEDULER_BASES: tuple[type, ...] = (LRScheduler, ReduceLROnPlateau)
LRSchedulerTypeTuple = SCHEDULER_BASES  # Lightning's name for it
ArgsType = list[str] | dict[str, Any] | Namespace | None  # what LightningCLI(args=...) takes
LIGHTNING_BASES = (Trainer, Module, DataModule, Callback)


class LightningArgumentParser(ArgumentParser):
    """jsonargparse's ArgumentParser plus `add_lightning_class_args`, `add_optimizer_args` and
    `add_lr_scheduler_args`, with Lightning's semantics."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.callback_keys: list[str] = []
        self._callback_classes: dict[str, tuple[type, bool]] = {}  # key -> (class, subclass_mode)
        self._optimizers: Registered = {}
        self._lr_schedulers: Registered = {}

    def add_lightning_class_args(
        self,
        lightning_class: type | Callable[..., Any],
        nested_key: str,
        subclass_mode: bool = False,
        required: bool = True,
    ) -> list[str]:
        """Add the `__init__` arguments of a Trainer, Module, DataModule or Callback class (or a
        function returning one) under `--nested_key.*`; callbacks join the trainer's callbacks."""
        if callable(lightning_class) and not isinstance(lightning_class, type):
            lightning_class = class_from_function(lightning_class)
        if not (isinstance(lightning_class, type) and issubclass(lightning_class, LIGHTNING_BASES)):
            raise bad_value(
                "add_lightning_class_args(lightning_class)", lightning_class,
                "a subclass of Trainer, LightningModule, LightningDataModule or Callback, or a "
                "function returning one",
            )  # fmt: skip
        is_callback = issubclass(lightning_class, Callback)
        if is_callback:  # built by the CLI, before the trainer that takes it (`build_callbacks` below)
            self.callback_keys.append(nested_key)
            self._callback_classes[nested_key] = (lightning_class, subclass_mode)
        instantiate = not (is_callback or issubclass(lightning_class, Trainer))
        if subclass_mode:
            return self.add_subclass_arguments(
                lightning_class, nested_key, fail_untyped=False, required=required, instantiate=instantiate
            )
        return self.add_class_arguments(
            lightning_class, nested_key, fail_untyped=False, instantiate=instantiate, sub_configs=True
        )

    def add_optimizer_args(
        self,
        optimizer_class: type[Optimizer] | tuple[type[Optimizer], ...] = (Optimizer,),
        nested_key: str = "optimizer",
        link_to: str = AUTOMATIC,
    ) -> None:
        """`--nested_key` for an optimizer (a tuple: any subclass of those, by name or class path);
        `link_to="AUTOMATIC"` makes it the module's optimizer, a key links it to that argument."""
        _check_classes("add_optimizer_args(optimizer_class)", optimizer_class, (Optimizer,))
        self._add_group(optimizer_class, nested_key, skip={"params"})
        self._optimizers[nested_key] = (optimizer_class, link_to)

    def add_lr_scheduler_args(
        self,
        lr_scheduler_class: type | tuple[type, ...] = SCHEDULER_BASES,
        nested_key: str = "lr_scheduler",
        link_to: str = AUTOMATIC,
    ) -> None:
        """`--nested_key` for a learning-rate scheduler, as `add_optimizer_args`."""
        _check_classes("add_lr_scheduler_args(lr_scheduler_class)", lr_scheduler_class, SCHEDULER_BASES)
        self._add_group(lr_scheduler_class, nested_key, skip={"optimizer"})
        self._lr_schedulers[nested_key] = (lr_scheduler_class, link_to)

    def _add_group(self, cls: type | tuple[type, ...], key: str, skip: set[str]) -> None:
        kwargs: dict[str, Any] = {"instantiate": False, "fail_untyped": False, "skip": skip}
        if isinstance(cls, tuple):
            self.add_subclass_arguments(cls, key, required=False, **kwargs)
        else:
            self.add_class_arguments(cls, key, sub_configs=True, **kwargs)


def _check_classes(arg: str, given: Any, bases: tuple[type, ...]) -> None:
    classes = given if isinstance(given, tuple) else (given,)
    if not classes or not all(isinstance(c, type) and issubclass(c, bases) for c in classes):
        names = " or ".join(f"{b.__module__}.{b.__qualname__}" for b in bases)
        raise bad_value(arg, given, f"a subclass of {names}, or a tuple of them")


def class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__name__}"


def with_class_path(cls: type, init_args: Any) -> dict[str, Any]:
    """A group's parsed value as `{class_path, init_args}` (a single class's group has no class_path)."""
    if hasattr(init_args, "as_dict"):
        init_args = init_args.as_dict()
    return {"class_path": class_path(cls), "init_args": dict(init_args or {})}


def link_optimizers_and_lr_schedulers(parser: LightningArgumentParser) -> None:
    """Link each optimizer/scheduler group whose `link_to` is a key (not AUTOMATIC) to that key."""
    for key, (cls, link_to) in {**parser._optimizers, **parser._lr_schedulers}.items():
        if link_to == AUTOMATIC:
            continue
        if isinstance(cls, tuple):
            parser.link_arguments(key, link_to)
        else:
            parser.link_arguments(key, link_to, compute_fn=lambda value, c=cls: with_class_path(c, value))


def build_callbacks(parser: LightningArgumentParser, cfg: Any) -> list[Callback]:
    """The callbacks of `add_lightning_class_args` keys, built from the parsed `cfg` (in the order
    added; a subclass-mode key left unset builds nothing)."""
    built = []
    for key in parser.callback_keys:
        value = cfg.get(key)
        if value is None:
            continue
        cls, subclass_mode = parser._callback_classes[key]
        side = ArgumentParser(exit_on_error=False)
        if subclass_mode:
            side.add_subclass_arguments(cls, "callback", fail_untyped=False)
        else:
            side.add_class_arguments(cls, "callback", fail_untyped=False, sub_configs=True)
        instantiate = getattr(side, "instantiate", None) or side.instantiate_classes
        built.append(instantiate(Namespace(callback=value)).callback)
    return built
