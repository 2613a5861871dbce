"""The loop-side methods of Lightning's precision plugins (`pre_backward`, `backward`, `post_backward`,
`optimizer_step`), for code that calls them by hand: they call the same hooks, in the same order, with
the loss scaler where the plugin has one, as Lightning's do. surge's own loop never calls them (it runs
surge's precision object), and a plugin subclass overriding them is refused when the Trainer is built."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor
from torch.optim import LBFGS

from ...errors import MisconfigurationError
from ...module import Module


class LoopMethods:
    """Mixed into every Lightning precision plugin; `scaler` is the loss scaler, when there is one."""

    scaler: Any = None
    unscale_when_skipped = False  # FSDP's plugin unscales even when the closure skipped backward
    refuses_lbfgs = True  # the AMP plugin's check (FSDP's has none)

    def pre_backward(self, tensor: Tensor, module: Any) -> Tensor:
        """The loss as backward will see it (scaled, with a scaler), after `on_before_backward`."""
        if self.scaler is not None:
            tensor = self.scaler.scale(tensor)
        trainer = module.trainer
        for callback in trainer.callbacks:
            callback.on_before_backward(trainer, module, tensor)
        module.on_before_backward(tensor)
        return tensor

    def backward(self, tensor: Tensor, model: Any, optimizer: Any, *args: Any, **kwargs: Any) -> None:
        """`model.backward(tensor, *args, **kwargs)` (the module's hook does the backward pass)."""
        model.backward(tensor, *args, **kwargs)

    def post_backward(self, tensor: Tensor, module: Any) -> Tensor:
        """The detached loss, after `on_after_backward`."""
        trainer = module.trainer
        for callback in trainer.callbacks:
            callback.on_after_backward(trainer, module)
        module.on_after_backward()
        return tensor.detach()

    def optimizer_step(self, optimizer: Any, model: Any, closure: Callable[[], Any], **kwargs: Any) -> Any:
        """Step `optimizer`: the closure first, then `on_before_optimizer_step` and clipping; with a
        scaler, gradients unscaled before the hook and the step skipped on non-finite ones."""
        if self.scaler is None:
            return optimizer.step(
                closure=lambda: self._closure_then_hooks(model, optimizer, closure), **kwargs
            )
        if self.refuses_lbfgs and isinstance(optimizer, LBFGS):
            raise MisconfigurationError("AMP and the LBFGS optimizer are not compatible.")
        result = closure()
        skipped = result is None and model.automatic_optimization  # training_step returned None
        if not getattr(optimizer, "_step_supports_amp_scaling", False) and (
            self.unscale_when_skipped or not skipped
        ):
            self.scaler.unscale_(optimizer)
        self._after_closure(model, optimizer)
        if skipped:
            return result
        out = self.scaler.step(optimizer, **kwargs)
        self.scaler.update()
        return out

    def _closure_then_hooks(self, model: Any, optimizer: Any, closure: Callable[[], Any]) -> Any:
        result = closure()
        self._after_closure(model, optimizer)
        return result

    def _after_closure(self, model: Any, optimizer: Any) -> None:
        trainer = model.trainer
        for callback in trainer.callbacks:
            callback.on_before_optimizer_step(trainer, model, optimizer)
        model.on_before_optimizer_step(optimizer)
        if isinstance(model, Module) and model.automatic_optimization:
            model.configure_gradient_clipping(
                optimizer,
                gradient_clip_val=trainer.gradient_clip_val,
                gradient_clip_algorithm=trainer.gradient_clip_algorithm,
            )
