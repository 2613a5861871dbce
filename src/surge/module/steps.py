"""The module's own `optimizer_step`, as Lightning calls it: once per optimizer at the end of an
accumulation window, with an optimizer whose `step(closure=...)` goes through surge's precision
(unscale, clip, loss-scaler skip) and a closure. Built only when the module overrides it."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from torch.optim import Optimizer


class StepOptimizer:
    """The optimizer handed to `Module.optimizer_step`: attributes are the wrapped optimizer's;
    `step(closure)` runs the closure, then the precision's clipped (or skipped) step."""

    def __init__(self, optimizer: Optimizer, step: Callable[[], bool]) -> None:
        # An instance of the optimizer's own class too, as Lightning's wrapper is: isinstance checks hold.
        object.__setattr__(self, "__class__", _step_class(type(optimizer)))
        self.__dict__["optimizer"] = optimizer
        self.__dict__["_step"] = step
        self.__dict__["stepped"] = True

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """The training step and backward already ran; the closure runs the hooks that precede a step."""
        result = closure() if closure is not None else None
        self.__dict__["stepped"] = self._step()
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["optimizer"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.__dict__["optimizer"], name, value)

    def __repr__(self) -> str:
        return f"StepOptimizer({self.optimizer!r})"


_STEP_CLASSES: dict[type, type] = {}


def _step_class(kind: type) -> type:
    """`StepOptimizer` subclassing `kind` (one class per optimizer class, made once)."""
    if kind not in _STEP_CLASSES:
        _STEP_CLASSES[kind] = type(f"Step{kind.__name__}", (StepOptimizer, kind), {})
    return _STEP_CLASSES[kind]


class ModuleOptimizerStep:
    """Calls `module_step(epoch, batch_idx, optimizer, closure)` for each optimizer of the run."""

    def __init__(
        self,
        module_step: Callable[..., Any],
        optimizers: list[Optimizer],
        step_one: Callable[[int], bool],
        before_step: Callable[[Optimizer], None] | None,
    ) -> None:
        self._module_step = module_step
        self._wrapped = [StepOptimizer(opt, partial(step_one, i)) for i, opt in enumerate(optimizers)]
        self._closures = [self._closure(opt, before_step) for opt in optimizers]
        self._loss: Any = None  # the window's last loss, what the closures return

    def _closure(self, opt: Optimizer, before_step: Callable[[Optimizer], None] | None) -> Callable[[], Any]:
        def closure() -> Any:
            if before_step is not None:
                before_step(opt)
            return self._loss.detach() if self._loss is not None else None

        return closure

    def __call__(self, index: int, epoch: int, batch_idx: int, loss: Any = None) -> bool:
        """Step optimizer `index` through the module; False if the precision skipped the step.
        `global_step` counts the step after the hook returns (Lightning's automatic optimization:
        inside the hook, after `optimizer.step()`, it is still the step's index). The closure
        returns `loss` detached, as Lightning's returns the step's loss (so `optimizer.step` does)."""
        wrapped = self._wrapped[index]
        wrapped.__dict__["stepped"] = True
        self._loss = loss
        try:
            self._module_step(epoch, batch_idx, wrapped, self._closures[index])
        finally:
            self._loss = None  # not kept alive (with its graph's memory) past the step
        return bool(wrapped.stepped)
