"""A stage's start and end as Lightning runs them: the module's callbacks joined, the data
prepared, and `setup`/`teardown` on the datamodule, the callbacks and the module, in that order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from ..callbacks.base import Callback, overrides
from ..errors import MisconfigurationError
from ..module import Module
from ..module.log_hooks import NoLogs, refusing
from ..rank_zero import info
from .hooks import refuse_unsupported
from .run_status import TrainerFn

if TYPE_CHECKING:
    from ..precision import Precision
    from ..trainer import Trainer


def with_module_callbacks(module: Module, callbacks: list[Callback]) -> list[Callback]:
    """`callbacks` with what `module.configure_callbacks()` returns: a returned callback replaces the
    Trainer's of its type (or a parent type), as in Lightning; checkpointing stays last."""
    if not overrides(module, Module, "configure_callbacks"):
        return callbacks
    returned = module.configure_callbacks()
    added = list(returned) if isinstance(returned, Sequence) else [returned]
    for cb in added:
        if not isinstance(cb, Callback):
            raise MisconfigurationError(
                f"{type(module).__name__}.configure_callbacks() returned {cb!r}, which is not a "
                "surge.callbacks.Callback; return a callback or a list of them."
            )
    if not added:
        return callbacks
    replaced = {
        own
        for cb in added
        for own in {type(c) for c in callbacks}
        if own is not Callback and issubclass(type(cb), own)
    }
    if replaced:
        info(
            "configure_callbacks() replaces the Trainer's " + ", ".join(sorted(t.__name__ for t in replaced))
        )
    from ..callbacks.checkpoint import ModelCheckpoint

    merged = [c for c in callbacks if type(c) not in replaced] + added
    return [c for c in merged if not isinstance(c, ModelCheckpoint)] + [
        c for c in merged if isinstance(c, ModelCheckpoint)
    ]


def _attach(callbacks: list[Callback], module: Module) -> None:
    """`self.log` in a callback's hook logs through the stage's module (Lightning's callbacks have it)."""
    for cb in callbacks:
        if isinstance(cb, Callback):
            cb.attach_module(module)


def enter_stage(
    trainer: Trainer, module: Module, datamodule: Any, stage: str, precision: Precision
) -> list[Callback]:
    """Before a stage reads any data: refuse hooks surge would skip, join the module's callbacks,
    `prepare_data` (local rank 0), `setup(stage)` and `configure_model` (under the precision's
    `module_init_context`, as Lightning). Returns the callbacks."""
    if not isinstance(module, Module):
        raise MisconfigurationError(f"model must be a surge.Module, got {type(module).__name__}")
    # as Lightning: `self.log` refused in a predict stage, and in the hooks below
    if stage == "predict":
        module._attach(results=NoLogs(None))
    with refusing(module, "configure_callbacks"):
        callbacks = with_module_callbacks(module, trainer.callbacks)
    refuse_unsupported(module, callbacks, stage)
    stage = TrainerFn(
        stage
    )  # a str, as Lightning passes it: `stage == "fit"` and `TrainerFn.FITTING` both hold
    module._attach(trainer=trainer)  # `self.trainer` works in the hooks below
    _attach(callbacks, module)
    _prepare_and_setup(trainer, module, datamodule, callbacks, stage, precision)
    module.zero_grad()  # as Lightning at every stage's start: no gradient from before the stage leaks in
    return callbacks


def _prepare_and_setup(
    trainer: Trainer,
    module: Module,
    datamodule: Any,
    callbacks: list[Callback],
    stage: str,
    precision: Precision,
) -> None:
    """`prepare_data` (local rank 0), `setup(stage)` and `configure_model`, `self.log` refused in each."""
    if trainer.local_rank == 0:
        if datamodule is not None:
            datamodule.prepare_data()
        if overrides(module, Module, "prepare_data"):
            with refusing(module, "prepare_data"):
                module.prepare_data()
    if datamodule is not None:
        datamodule.trainer = trainer
        datamodule.setup(stage=stage)
    for cb in callbacks:
        if overrides(cb, Callback, "setup"):
            with refusing(module, "setup"):
                cast(Any, cb).setup(trainer, module, stage=stage)
    if overrides(module, Module, "setup"):
        with refusing(module, "setup"):
            module.setup(stage=stage)
    if overrides(module, Module, "configure_model"):
        with precision.module_init_context(), refusing(module, "configure_model"):
            module.configure_model()


def leave_stage(hooks: Any, module: Module | None, datamodule: Any, stage: str) -> None:
    """After a stage succeeded: `teardown(stage)` on the datamodule, the callbacks, the module."""
    stage = TrainerFn(stage)
    if datamodule is not None:
        datamodule.teardown(stage=stage)
    hooks.call("teardown", stage=stage)
