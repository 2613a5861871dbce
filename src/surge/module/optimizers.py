"""The Module's view of its optimizers, with Lightning's names: `optimizers()`, `lr_schedulers()`,
`manual_backward`, `toggle_optimizer`/`untoggle_optimizer`/`toggled_optimizer` and `clip_gradients`
(what manual optimization and fine-tuning use)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from ..errors import MisconfigurationError, SurgeRuntimeError, SurgeTypeError
from ..utilities.clip import norm_clipper

if TYPE_CHECKING:
    from ..optim.manual import OptimizerSteps
    from ..trainer import Trainer


class ModuleOptimizers:
    """Mixed into `surge.Module`; the fit loop sets `_optimizer_steps` (the fit's `LightningOptimizer`s)."""

    if TYPE_CHECKING:  # what the Module provides
        automatic_optimization: bool
        _optimizer_steps: OptimizerSteps | None

        @property
        def trainer(self) -> Trainer: ...

    def optimizers(self, use_pl_optimizer: bool = True) -> Any:
        """The optimizer (or list of them) from `configure_optimizers`, as `LightningOptimizer`s: their
        `step()` runs `on_before_optimizer_step` and the precision's step and, under manual
        optimization, counts one `global_step`. `use_pl_optimizer=False`: the torch optimizers."""
        steps = self._optimizer_steps
        if use_pl_optimizer and steps is not None:
            opts: list[Any] = steps.optimizers
        else:
            opts = self.trainer.optimizers
        return opts[0] if len(opts) == 1 else opts

    def lr_schedulers(self) -> Any:
        """The scheduler (or list), for manual optimization."""
        scheds = [c.scheduler for c in self.trainer.lr_scheduler_configs]
        if not scheds:
            return None
        return scheds[0] if len(scheds) == 1 else scheds

    def manual_backward(self, loss: Tensor, *args: Any, **kwargs: Any) -> None:
        """Backward under manual optimization (`automatic_optimization = False`): the
        `on_before_backward(loss)` hooks, the precision's backward (loss scaling), then the
        `on_after_backward()` hooks; `args`/`kwargs` go to `loss.backward` (`retain_graph=True`)."""
        if self.automatic_optimization:
            raise MisconfigurationError(
                "manual_backward() is for manual optimization: set self.automatic_optimization = False "
                "in __init__, or return the loss from training_step and let the Trainer run the backward."
            )
        if self._optimizer_steps is None:
            raise SurgeRuntimeError(f"{type(self).__name__}.manual_backward() needs a running fit")
        self._optimizer_steps.backward(loss, *args, **kwargs)

    def toggle_optimizer(self, optimizer: Any) -> None:
        """Only `optimizer`'s parameters require grad (each keeps its own setting) until
        `untoggle_optimizer`: the others' gradients are not computed."""
        saved: dict[nn.Parameter, bool] = {}
        for opt in self.trainer.optimizers:
            for param in _params(opt):
                if param not in saved:
                    saved[param] = param.requires_grad
                    param.requires_grad = False
        for param in _params(_bare(optimizer)):
            param.requires_grad = saved[param]
        self._requires_grad_saved = saved

    def untoggle_optimizer(self, optimizer: Any) -> None:
        """Give the other optimizers' parameters back the `requires_grad` they had before `toggle_optimizer`."""
        bare = _bare(optimizer)
        for opt in self.trainer.optimizers:
            if opt is not bare:
                for param in _params(opt):
                    if param in self._requires_grad_saved:
                        param.requires_grad = self._requires_grad_saved[param]
        self._requires_grad_saved = {}

    @contextlib.contextmanager
    def toggled_optimizer(self, optimizer: Any) -> Iterator[None]:
        """`toggle_optimizer(optimizer)` for the block, `untoggle_optimizer(optimizer)` after it."""
        self.toggle_optimizer(optimizer)
        try:
            yield
        finally:
            self.untoggle_optimizer(optimizer)

    def clip_gradients(
        self,
        optimizer: Any,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip `optimizer`'s gradients (at true scale under fp16) by norm (default) or value; a
        value of None or 0 clips nothing."""
        given = gradient_clip_algorithm
        algorithm = "norm" if given is None else given.lower() if isinstance(given, str) else given
        if algorithm not in ("norm", "value"):
            raise MisconfigurationError(
                f'clip_gradients(gradient_clip_algorithm={gradient_clip_algorithm!r}) is not valid: use "norm" or "value".'
            )
        value = 0.0 if gradient_clip_val is None else gradient_clip_val
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SurgeTypeError(
                f"clip_gradients(gradient_clip_val={gradient_clip_val!r}) is not valid: use a number or None."
            )
        if value <= 0:
            return
        bare = _bare(optimizer)
        self.trainer.precision_plugin.unscale_gradients(bare)
        params = list(_params(bare))
        if algorithm == "norm":
            norm_clipper(params)(params, value)
        else:
            torch.nn.utils.clip_grad_value_(params, value)


def _bare(optimizer: Any) -> Any:
    """The torch optimizer behind a `LightningOptimizer` (or the optimizer itself)."""
    return getattr(optimizer, "optimizer", optimizer)


def _params(optimizer: Any) -> list[nn.Parameter]:
    return [p for group in optimizer.param_groups for p in group["params"]]
