"""The Module's hooks whose default does work the loops would otherwise do themselves (backward,
clipping, the module's mode around evaluation): the loops call one only where a subclass or the
instance overrides it, and do the same work directly otherwise (see `loops/hooks.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import Tensor


class LoopHooks:
    """Lightning's `backward`, `configure_gradient_clipping` and `on_{stage}_model_{eval,train}` hooks."""

    if TYPE_CHECKING:  # what the Module provides

        def eval(self) -> Any: ...
        def train(self, mode: bool = True) -> Any: ...
        def zero_grad(self, set_to_none: bool = True) -> None: ...
        def clip_gradients(
            self, optimizer: Any, gradient_clip_val: Any = None, gradient_clip_algorithm: Any = None
        ) -> None: ...

    def backward(self, loss: Tensor, *args: Any, **kwargs: Any) -> None:
        """Run the backward of `loss` (already scaled by the precision); the loop calls it after
        `on_before_backward`."""
        loss.backward(*args, **kwargs)

    def configure_gradient_clipping(
        self,
        optimizer: Any,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip before each optimizer step, with the Trainer's `gradient_clip_val`/`_algorithm`."""
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    # -- the module's mode around evaluation (the loops do the same when these are not overridden)
    def on_validation_model_eval(self) -> None:
        """Put the module in eval mode before validation."""
        self.eval()

    def on_validation_model_train(self) -> None:
        """After validation; overriding it replaces the loop's restore of each submodule's own mode."""
        self.train()

    def on_validation_model_zero_grad(self) -> None:
        """Free the gradients before validation inside fit (not inside an accumulation window)."""
        self.zero_grad()

    def on_test_model_eval(self) -> None:
        """Put the module in eval mode before testing."""
        self.eval()

    def on_test_model_train(self) -> None:
        """After testing; overriding it replaces the loop's restore of each submodule's own mode."""
        self.train()

    def on_predict_model_eval(self) -> None:
        """Put the module in eval mode before predicting."""
        self.eval()
