"""Manual optimization as Lightning has it: the optimizers `self.optimizers()` hands out step
through the Trainer's precision and count each step as one `global_step`; the schedulers are the
module's to step."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from torch.optim import Optimizer

from .errors import MisconfigurationError


class ManualOptimizer:
    """An optimizer under manual optimization (Lightning's `LightningOptimizer`).

    `step()` runs the precision's step (fp16 loss scaling included) and counts one optimizer step;
    every other attribute is the wrapped optimizer's own.
    """

    def __init__(self, optimizer: Optimizer, precision: Any, count: Callable[[], None]) -> None:
        self._optimizer = optimizer
        self._precision = precision
        self._count = count

    @property
    def optimizer(self) -> Optimizer:
        return self._optimizer

    def step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        """One optimizer step (`closure` as torch takes it, e.g. for LBFGS); counted in `global_step`."""
        result = None
        if closure is None and not kwargs:
            self._precision.optimizer_step(self._optimizer, None)
            self._precision.after_optimizer_steps()
        elif getattr(self._precision, "scaler", None) is not None:
            raise MisconfigurationError(
                "optimizer.step(closure, ...) under fp16 loss scaling is not supported: call "
                "self.manual_backward(loss) and then optimizer.step() without arguments."
            )
        else:
            result = self._optimizer.step(closure, **kwargs)
        self._count()
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._optimizer, name)

    def __repr__(self) -> str:
        return f"ManualOptimizer({self._optimizer!r})"


def positional_count(fn: Callable[..., Any]) -> int:
    """How many positional arguments a (bound) step method takes; a large number for `*args`.

    A method a wrapper replaced on the instance (FSDP's forward-method registration) is read from
    the class, where the user defined it.
    """
    owner, name = getattr(fn, "__self__", None), getattr(fn, "__name__", None)
    defined = getattr(type(owner), name, None) if owner is not None and name else None
    try:
        if inspect.isfunction(defined):
            params = list(inspect.signature(defined).parameters.values())[1:]  # without self
        else:
            params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return 1 << 16
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return 1 << 16
    return sum(p.kind in kinds for p in params)


def batch_only(step: Callable[..., Any], method: Callable[..., Any]) -> Callable[..., Any]:
    """`step` as the loops call it, `(batch, batch_idx, ...)`, also when the user's `method` takes
    only `batch` (as Lightning allows); decided once, here, never per step."""
    if positional_count(method) >= 2:
        return step
    return lambda batch, *_: step(batch)
