"""Calling hooks: only those the Module or a Callback actually overrides."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from ..callbacks.base import CALLBACK_HOOKS, Callback, overrides
from ..callbacks.batch_end import batch_end_calls
from ..errors import MisconfigurationError
from ..module import OVERRIDABLE, Module
from ..module.log_hooks import guarded
from ..module.model_hooks import HOOKS

if TYPE_CHECKING:
    from ..trainer import Trainer


class Refusal(NamedTuple):
    """A Lightning hook surge does not call: what to do instead, and whether a Callback that
    defines it is refused too (the hooks Lightning 2.0 removed from both; not a Module-only one)."""

    advice: str
    callbacks_too: bool


# Lightning hooks surge does not call: overriding one is refused before any work, with what to do.
REFUSED_HOOKS = {
    "configure_sharded_model": Refusal("rename it configure_model (Lightning deprecated configure_sharded_model)", False),
    # Removed in Lightning 2.0, which refuses them too:
    "training_epoch_end": Refusal("use on_train_epoch_end (Lightning 2.0 removed training_epoch_end)", True),
    "validation_epoch_end": Refusal("use on_validation_epoch_end (Lightning 2.0 removed validation_epoch_end)", True),
    "test_epoch_end": Refusal("use on_test_epoch_end (Lightning 2.0 removed test_epoch_end)", True),
    "predict_epoch_end": Refusal("use on_predict_epoch_end (Lightning 2.0 removed predict_epoch_end)", True),
    "training_step_end": Refusal("do the work in training_step (Lightning 2.0 removed training_step_end)", False),
    "validation_step_end": Refusal("do the work in validation_step (Lightning 2.0 removed validation_step_end)", False),
    "test_step_end": Refusal("do the work in test_step (Lightning 2.0 removed test_step_end)", False),
    "on_epoch_start": Refusal("use on_train_epoch_start (Lightning 2.0 removed on_epoch_start)", True),
    "on_epoch_end": Refusal("use on_train_epoch_end (Lightning 2.0 removed on_epoch_end)", True),
    "on_batch_start": Refusal("use on_train_batch_start (Lightning 2.0 removed on_batch_start)", True),
    "on_batch_end": Refusal("use on_train_batch_end (Lightning 2.0 removed on_batch_end)", True),
    "on_pretrain_routine_start": Refusal("use on_fit_start (Lightning 2.0 removed on_pretrain_routine_start)", True),
    "on_pretrain_routine_end": Refusal("use on_fit_start (Lightning 2.0 removed on_pretrain_routine_end)", True),
}  # fmt: skip
REFUSED_MODULE_HOOKS = {name: r.advice for name, r in REFUSED_HOOKS.items()}
REFUSED_CALLBACK_HOOKS = {name: r.advice for name, r in REFUSED_HOOKS.items() if r.callbacks_too}


def refuse_unsupported(module: Module, callbacks: Sequence[Any], stage: str) -> None:
    """Raise, naming the hook, if `module` or a callback overrides a hook surge would not call."""
    found = [
        (f"{type(obj).__name__}.{name}", advice)
        for obj, table in [
            (module, REFUSED_MODULE_HOOKS),
            *((cb, REFUSED_CALLBACK_HOOKS) for cb in callbacks),
        ]
        for name, advice in table.items()
        if callable(getattr(obj, name, None))
    ]
    if found:
        listed = "; ".join(f"{where}: {advice}" for where, advice in found)
        raise MisconfigurationError(
            f"{stage}() does not call {', '.join(w for w, _ in found)}, which you defined; nothing is "
            f"silently skipped, so it stops here. {listed}."
        )


class Hooks:
    """Per hook, the bound methods to call, found once per run (`overrides`: a hook set on the
    instance counts, `None` switches one off; a hook nobody overrides is never called).

    Callbacks get `(trainer, module, *args)`; the Module gets `(*args)`. As in Lightning, the
    callbacks run first, then the Module; at a training epoch's end the callbacks that monitor
    a metric (checkpointing, early stopping) run after the Module, so they see what it logged.
    """

    def __init__(self, trainer: Trainer, module: Module, callbacks: Sequence[Callback]) -> None:
        from ..callbacks.checkpoint import ModelCheckpoint
        from ..callbacks.early_stopping import EarlyStopping

        self.trainer = trainer
        self.module_fns: dict[str, Callable[..., Any]] = {
            name: getattr(module, name) for name in (*HOOKS, *OVERRIDABLE) if overrides(module, Module, name)
        }
        if "clip_gradients" in self.module_fns and "configure_gradient_clipping" not in self.module_fns:
            # the default configure_gradient_clipping calls the module's clip_gradients at every step (as
            # Lightning's), clipping or not: the module's own version sees every call
            self.module_fns["configure_gradient_clipping"] = module.configure_gradient_clipping
        self.callback_fns: dict[str, list[Callable[..., Any]]] = {}
        for name in CALLBACK_HOOKS:
            fns = [getattr(cb, name) for cb in callbacks if overrides(cb, Callback, name)]
            if fns:
                self.callback_fns[name] = fns
        monitoring = (ModelCheckpoint, EarlyStopping)
        self._epoch_end_last = [
            cb.on_train_epoch_end
            for cb in callbacks
            if isinstance(cb, monitoring) and overrides(cb, Callback, "on_train_epoch_end")
        ]
        self._epoch_end_first = [
            guarded(module, "on_train_epoch_end", fn)
            for fn in self.callback_fns.get("on_train_epoch_end", ())
            if fn not in self._epoch_end_last
        ]
        self._epoch_end_last = [guarded(module, "on_train_epoch_end", fn) for fn in self._epoch_end_last]
        self._module = module
        # as Lightning: `self.log` refused, or per epoch only, in some hooks (checked once per call of
        # an overridden hook, not in the training step)
        self.module_fns = {name: guarded(module, name, fn) for name, fn in self.module_fns.items()}
        self.callback_fns = {
            name: [guarded(module, name, fn) for fn in fns] for name, fns in self.callback_fns.items()
        }

    def module(self, name: str, *args: Any, **kwargs: Any) -> Any:
        fn = self.module_fns.get(name)
        return fn(*args, **kwargs) if fn is not None else None

    def callbacks(
        self, name: str, *args: Any, after: Callable[[Any], None] | None = None, **kwargs: Any
    ) -> None:
        """Each callback's hook in order; `after(callback)` runs after each (checks what it did)."""
        for fn in self.callback_fns.get(name, ()):
            fn(self.trainer, self._module, *args, **kwargs)
            if after is not None:
                after(getattr(fn, "__self__", fn))

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Callbacks, then the module hook; returns the module hook's result."""
        self.callbacks(name, *args, **kwargs)
        return self.module(name, *args, **kwargs)

    def train_epoch_end(self) -> None:
        """`on_train_epoch_end` of the callbacks that monitor nothing, then of the Module."""
        for fn in self._epoch_end_first:
            fn(self.trainer, self._module)
        self.module("on_train_epoch_end")

    def read_at_epoch_end(self) -> bool:
        """Whether an `on_train_epoch_end` that may read `callback_metrics` runs before the monitors."""
        return bool(self._epoch_end_first) or "on_train_epoch_end" in self.module_fns

    def train_epoch_end_monitors(self) -> None:
        """`on_train_epoch_end` of checkpointing and early stopping: last, once the epoch's
        metrics (the Module's included) are published."""
        for fn in self._epoch_end_last:
            fn(self.trainer, self._module)

    def batch_end_callbacks(self) -> list[Callable[..., Any]]:
        """The callbacks' `on_train_batch_end` to call in the epoch starting (those idle in it left
        out: `callbacks.batch_end`)."""
        return batch_end_calls(self.callback_fns.get("on_train_batch_end", ()), self.trainer)

    def any(self, name: str) -> bool:
        return name in self.module_fns or name in self.callback_fns

    def overridden(self, name: str) -> bool:
        """Whether the Module overrides hook `name` (then it is called instead of the loop's default)."""
        return name in self.module_fns
