"""The optimizers a module steps itself, as Lightning has them: `self.optimizers()` hands out
`LightningOptimizer`s whose `step()` runs `on_before_optimizer_step` and the precision's step (fp16
loss scaling) and, under manual optimization, counts one `global_step`; `self.manual_backward(loss)`
runs `on_before_backward`, the precision's backward and `on_after_backward`. The schedulers are
the module's to step."""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from torch import Tensor
from torch.optim import Optimizer

from ..errors import MisconfigurationError, SurgeTypeError
from . import precision_step

if TYPE_CHECKING:
    from ..loops.hooks import Hooks
    from ..module import Module
    from ..precision import Precision
    from ..strategies.base import Strategy

_OWN = frozenset({"_optimizer", "_steps"})  # the wrapper's own attributes; every other one is the optimizer's


class LightningOptimizer:
    """An optimizer as `self.optimizers()` hands it out (Lightning's class and name; the same object
    in native surge). It is an instance of the wrapped optimizer's class too (`isinstance(opt,
    torch.optim.Adam)`; its type is named `LightningAdam`, as in Lightning).

    `step(closure=None, **kwargs)` steps through the fit: the closure (if any), then the
    `on_before_optimizer_step` hooks, then the precision's step; under manual optimization each
    step is one `global_step`. Outside a fit it is the optimizer's own `step`. `zero_grad`,
    `state_dict`, `load_state_dict`, `add_param_group` and every attribute (`param_groups`,
    `state`, `defaults`) are the wrapped optimizer's, read and written there.
    """

    _optimizer: Optimizer
    _steps: OptimizerSteps | None

    def __new__(cls, optimizer: Optimizer | LightningOptimizer) -> LightningOptimizer:
        bare = optimizer.optimizer if isinstance(optimizer, LightningOptimizer) else optimizer
        if not isinstance(bare, Optimizer):
            raise SurgeTypeError(f"LightningOptimizer(optimizer={optimizer!r}) needs a torch.optim.Optimizer")
        return object.__new__(_typed(cls, type(bare)))

    def __init__(self, optimizer: Optimizer | LightningOptimizer) -> None:
        bare = optimizer.optimizer if isinstance(optimizer, LightningOptimizer) else optimizer
        object.__setattr__(self, "_optimizer", bare)
        object.__setattr__(self, "_steps", None)

    @property
    def optimizer(self) -> Optimizer:
        """The torch optimizer itself."""
        return self._optimizer

    def step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        """One optimizer step (`closure` re-evaluates the loss, as torch's `step` takes it, e.g. for
        LBFGS); returns what the optimizer's step returns (the closure's loss when given)."""
        if closure is not None and not callable(closure):
            raise MisconfigurationError(f"optimizer.step(closure={closure!r}): the closure must be callable")
        if self._steps is None:
            return (
                self._optimizer.step(closure=closure, **kwargs)
                if closure is not None
                else self._optimizer.step(**kwargs)
            )
        return self._steps.step(self._optimizer, closure, kwargs)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return self._optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._optimizer.load_state_dict(state_dict)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self._optimizer.add_param_group(param_group)

    @contextlib.contextmanager
    def toggle_model(self, sync_grad: bool = True) -> Iterator[None]:
        """Only this optimizer's parameters require grad inside the block (`module.toggle_optimizer`);
        `sync_grad=False` also skips the gradient all-reduce of its backwards (DDP's no_sync)."""
        if self._steps is None:
            raise MisconfigurationError(
                "optimizer.toggle_model() needs a running fit (it toggles the Trainer's module)"
            )
        with self._steps.toggled(self, sync_grad):
            yield

    def __getattr__(self, name: str) -> Any:
        if name in _OWN:  # not set yet (copying, unpickling)
            raise AttributeError(name)
        return getattr(self._optimizer, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self._optimizer, name, value)


_TYPES: dict[tuple[type, type], type] = {}


def _typed(base: type[LightningOptimizer], optimizer_class: type[Optimizer]) -> type[LightningOptimizer]:
    """`Lightning<Name>`: the wrapper class that is also a subclass of the optimizer's class, so
    `isinstance` checks against the optimizer's class hold (made once per optimizer class)."""
    key = (base, optimizer_class)
    if key not in _TYPES:
        try:
            _TYPES[key] = type(f"Lightning{optimizer_class.__name__}", (base, optimizer_class), {})
        except TypeError:  # a class that cannot be subclassed: the wrapper alone
            _TYPES[key] = base
    return _TYPES[key]


class OptimizerSteps:
    """What the fit's `LightningOptimizer`s and `manual_backward` run: the hooks around backward and
    step (callbacks first, then the module, as Lightning calls them), the precision, the strategy's
    gradient sync, and the step count under manual optimization. Built by the fit loop."""

    def __init__(
        self,
        optimizers: list[Optimizer],
        precision: Precision,
        hooks: Hooks,
        strategy: Strategy,
        module: Module,
        count: Callable[[], None] | None,
        compiled: Mapping[int, Callable[[], Any]] | None = None,
        watch: Callable[[Tensor], None] | None = None,
    ) -> None:
        self.optimizers = [LightningOptimizer(opt) for opt in optimizers]
        self._compiled = compiled or {}  # compile="step": the compiled step of each optimizer, by id
        for opt in self.optimizers:
            opt._steps = self
        self._precision, self._hooks, self._strategy, self._module = precision, hooks, strategy, module
        self._count = count
        self._before_step = hooks.any("on_before_optimizer_step")
        self._before_backward = hooks.any("on_before_backward")
        self._after_backward = hooks.any("on_after_backward")
        self._module_backward = hooks.module_fns.get("backward")  # the module's own, if overridden
        self._watch = watch  # the non-finite guard's (manual optimization: it sees no other loss)

    def _call(self, name: str, *args: Any) -> None:
        self._hooks.callbacks(name, *args)
        self._hooks.module(name, *args)

    def backward(self, loss: Tensor, *args: Any, **kwargs: Any) -> None:
        """`manual_backward`: `on_before_backward(loss)`, the precision's (scaled) backward, then
        `on_after_backward()`; `args`/`kwargs` go to `loss.backward` (e.g. `retain_graph=True`)."""
        self._strategy.prepare_manual_backward(loss)
        if self._watch is not None and loss.numel() == 1:  # (a tensor backward with `gradient=`: not a loss)
            self._watch(loss)
        if self._before_backward:
            self._call("on_before_backward", loss)
        run = self._module_backward
        if run is not None or args or kwargs:
            backward = run if run is not None else Tensor.backward
            self._precision.backward(loss, lambda scaled: backward(scaled, *args, **kwargs))
        else:
            self._precision.backward(loss)
        if self._after_backward:
            self._call("on_after_backward")

    def step(self, optimizer: Optimizer, closure: Callable[[], Any] | None, kwargs: dict[str, Any]) -> Any:
        """The closure (it usually runs `manual_backward`), the `on_before_optimizer_step` hooks with
        true-scale gradients, the precision's step; one `global_step` under manual optimization."""
        precision, result = self._precision, None
        if kwargs and precision.skips_nonfinite_steps:
            raise MisconfigurationError(
                f"optimizer.step({', '.join(f'{k}=...' for k in kwargs)}) under fp16 loss scaling is not "
                "supported: the loss scaler steps the optimizer without extra arguments."
            )
        if closure is not None and not precision.skips_nonfinite_steps:
            result = optimizer.step(
                closure=functools.partial(self._closure_then_hooks, optimizer, closure), **kwargs
            )
        elif kwargs:
            result = optimizer.step(
                closure=functools.partial(self._closure_then_hooks, optimizer, _nothing), **kwargs
            )
        else:
            result = closure() if closure is not None else None  # fp16: once, before the unscaled step
            self._hooks_before_step(optimizer)
            precision_step(precision, optimizer, None, self._compiled)
            precision.after_optimizer_steps()
        if self._count is not None:
            self._count()
        return result

    def _closure_then_hooks(self, optimizer: Optimizer, closure: Callable[[], Any]) -> Any:
        result = closure()
        self._hooks_before_step(optimizer)
        return result

    def _hooks_before_step(self, optimizer: Optimizer) -> None:
        if self._before_step:
            self._precision.unscale_gradients(optimizer)  # hooks see true-scale gradients
            self._call("on_before_optimizer_step", optimizer)

    @contextlib.contextmanager
    def toggled(self, optimizer: LightningOptimizer, sync_grad: bool) -> Iterator[None]:
        with self._strategy.no_sync() if not sync_grad else contextlib.nullcontext():
            self._module.toggle_optimizer(optimizer)
            yield
            self._module.untoggle_optimizer(optimizer)


def _nothing() -> None:
    return None


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
