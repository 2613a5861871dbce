"""`LightningOptimizer`: a thin wrapper that steps a torch optimizer; everything else is the optimizer's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.optim import Optimizer

from ...errors import SurgeTypeError


class LightningOptimizer:
    """Wraps `optimizer` as Lightning's `LightningOptimizer` does: `step(closure)` and `zero_grad()`
    call the optimizer's own; attributes (`param_groups`, `state`, ...) are the optimizer's.

    surge hands hooks the torch optimizer itself (`optimizer_step(..., optimizer, closure)` gets the
    optimizer); code that type-checks against this class or wraps an optimizer itself keeps working.
    """

    def __init__(self, optimizer: Optimizer) -> None:
        if isinstance(optimizer, LightningOptimizer):
            optimizer = optimizer.optimizer
        if not isinstance(optimizer, Optimizer):
            raise SurgeTypeError(f"LightningOptimizer(optimizer={optimizer!r}) needs a torch.optim.Optimizer")
        self._optimizer = optimizer

    @property
    def optimizer(self) -> Optimizer:
        return self._optimizer

    def step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        """`optimizer.step(closure, **kwargs)`: the closure runs the step and backward, as in torch."""
        return (
            self._optimizer.step(closure, **kwargs) if closure is not None else self._optimizer.step(**kwargs)
        )

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._optimizer.zero_grad(set_to_none=set_to_none)

    def __getattr__(self, name: str) -> Any:
        if name == "_optimizer":  # not set yet (copying, unpickling)
            raise AttributeError(name)
        return getattr(self._optimizer, name)

    def __repr__(self) -> str:
        return f"LightningOptimizer({self._optimizer!r})"
