"""The Callback interface: hooks the loops call, with the Trainer and the Module as arguments."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import Tensor
from torch.optim import Optimizer

from ..errors import SurgeRuntimeError
from ..module.model_hooks import StepOutput, hook_names

if TYPE_CHECKING:
    from ..module import Module
    from ..trainer import Trainer


class CallbackHooks:
    """The hooks, with Lightning's signatures; each does nothing here and is called only where a
    callback overrides it (`overrides`, `loops/hooks.py`). `CALLBACK_HOOKS` is read from this class."""

    def setup(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        """When a stage begins (`stage`: "fit", "validate", "test" or "predict")."""

    def teardown(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        """When a stage ends."""

    def on_fit_start(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_fit_end(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_sanity_check_start(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_sanity_check_end(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_train_start(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_train_end(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_train_epoch_start(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_train_epoch_end(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_train_batch_start(
        self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int
    ) -> None: ...
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: Module, outputs: StepOutput, batch: Any, batch_idx: int
    ) -> None:
        """`outputs` detached; a returned loss comes as `{"loss": loss}`."""

    def on_validation_start(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_validation_end(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_validation_epoch_start(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_validation_epoch_end(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_validation_batch_start(
        self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...
    def on_validation_batch_end(
        self,
        trainer: Trainer,
        pl_module: Module,
        outputs: StepOutput,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None: ...
    def on_test_start(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_test_end(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_test_epoch_start(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_test_epoch_end(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_test_batch_start(
        self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...
    def on_test_batch_end(
        self,
        trainer: Trainer,
        pl_module: Module,
        outputs: StepOutput,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None: ...
    def on_predict_start(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_predict_end(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_predict_epoch_start(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_predict_epoch_end(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_predict_batch_start(
        self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...
    def on_predict_batch_end(
        self,
        trainer: Trainer,
        pl_module: Module,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None: ...
    def on_before_backward(self, trainer: Trainer, pl_module: Module, loss: Tensor) -> None: ...
    def on_after_backward(self, trainer: Trainer, pl_module: Module) -> None: ...
    def on_before_optimizer_step(self, trainer: Trainer, pl_module: Module, optimizer: Optimizer) -> None: ...
    def on_before_zero_grad(self, trainer: Trainer, pl_module: Module, optimizer: Optimizer) -> None: ...
    def on_save_checkpoint(self, trainer: Trainer, pl_module: Module, checkpoint: dict[str, Any]) -> None:
        """May add keys to the checkpoint dict before it is written."""

    def on_load_checkpoint(self, trainer: Trainer, pl_module: Module, checkpoint: dict[str, Any]) -> None:
        """Read what `on_save_checkpoint` added, when a checkpoint is loaded."""

    def on_exception(self, trainer: Trainer, pl_module: Module, exception: BaseException) -> None:
        """When a stage ends by an exception (Ctrl-C and preemption included)."""


CALLBACK_HOOKS = hook_names(CallbackHooks)


class Callback(CallbackHooks):
    """Override the hooks you need; each receives `(trainer, module, ...)` like Lightning's.

    Hooks that a subclass does not override are never called, so an unused hook costs nothing.
    Batch hooks: `on_train_batch_start(trainer, module, batch, batch_idx)`,
    `on_train_batch_end(trainer, module, outputs, batch, batch_idx)` (outputs detached; a
    returned loss comes as `{"loss": loss}`),
    `on_validation_batch_end(trainer, module, outputs, batch, batch_idx, dataloader_idx)`.
    `on_save_checkpoint(trainer, module, checkpoint)` may add keys to the checkpoint dict.
    """

    def attach_module(self, module: Any) -> None:
        """The module of the stage that begins (the Trainer calls it): what `log` writes to."""
        self._logging_module = module

    def log(self, *args: Any, **kwargs: Any) -> None:
        """`self.log(name, value, ...)` inside a hook: the running module's `log`, as in Lightning."""
        self._module_to_log("log").log(*args, **kwargs)

    def log_dict(self, *args: Any, **kwargs: Any) -> None:
        """`self.log_dict(metrics, ...)` inside a hook: the running module's `log_dict`."""
        self._module_to_log("log_dict").log_dict(*args, **kwargs)

    def _module_to_log(self, method: str) -> Any:
        module = getattr(self, "_logging_module", None)  # (a subclass need not call __init__)
        if module is None:
            raise SurgeRuntimeError(
                f"{type(self).__name__}.{method}() logs through the running module: call it inside a hook "
                "of a Trainer's stage (fit, validate, test)."
            )
        return module

    @property
    def state_key(self) -> str:
        """The key of this callback's state in checkpoints; unique per configuration."""
        return type(self).__qualname__

    def _generate_state_key(self, **kwargs: Any) -> str:
        """A `state_key` naming the class and the settings that tell two instances apart (Lightning's
        helper, for callbacks that override `state_key`): `Name{'monitor': 'val_loss', ...}`."""
        return f"{type(self).__qualname__}{kwargs!r}"

    def state_dict(self) -> dict[str, Any]:
        """State saved in checkpoints."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what `state_dict` returned."""

    def restore_optimization(
        self, optimizers: list[Any], lr_scheduler_configs: list[Any], module: Any
    ) -> None:
        """On resume, after `load_state_dict` and before the optimizers' and schedulers' state is
        loaded: rebuild what this callback added to them (param groups, a scheduler), so that the
        saved state fits. `lr_scheduler_configs` is the run's list, changed in place."""


def overrides(obj: object, base: type, name: str) -> bool:
    """Whether `obj` has its own hook `name` rather than `base`'s no-op: a method of its class, or
    one set on the instance (a function, a mock); `None` on the instance switches the hook off."""
    attr = getattr(obj, name, None)
    if not callable(attr):
        return False
    return getattr(attr, "__func__", attr) is not getattr(base, name, None)
