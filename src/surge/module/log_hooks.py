"""Where `self.log` may log, hook by hook, as Lightning's table says (`_FxValidator.functions`):
the hooks where it is refused, and those where it logs per epoch only. A running stage puts the
refusal into the module's `results` slot around such a hook (once per call of that hook, and only
when it is overridden), so `self.log` in `training_step` checks nothing more."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import MisconfigurationError

# Lightning refuses `self.log` in these (its table's `None` entries).
NO_LOG_HOOKS = frozenset({
    "lr_scheduler_step", "on_fit_start", "on_fit_end", "on_sanity_check_start", "on_sanity_check_end",
    "on_train_end", "on_validation_end", "on_test_end", "on_predict_start", "on_predict_end",
    "on_predict_epoch_start", "on_predict_epoch_end", "on_before_batch_transfer", "transfer_batch_to_device",
    "on_after_batch_transfer", "on_predict_batch_start", "on_predict_batch_end", "on_exception", "state_dict",
    "on_save_checkpoint", "on_load_checkpoint", "load_state_dict", "setup", "teardown",
    "configure_sharded_model", "configure_model", "predict_step", "configure_optimizers", "train_dataloader",
    "val_dataloader", "test_dataloader", "prepare_data", "configure_callbacks", "on_validation_model_zero_grad",
    "on_validation_model_eval", "on_test_model_eval", "on_validation_model_train", "on_test_model_train",
})  # fmt: skip
# Training hooks where Lightning logs per epoch only (on_step=False, on_epoch=True); evaluation's
# own are checked by its loop (`loops.evaluate`).
TRAIN_EPOCH_HOOKS = frozenset({"on_train_start", "on_train_epoch_start", "on_train_epoch_end"})

PREDICT_REFUSAL = (
    "You are trying to `self.log()` but the loop's result collection is not registered yet. This is most"
    " likely because you are trying to log in a `predict` hook, but it doesn't support logging"
)


class NoLogs:
    """The `results` slot where `self.log` is refused: in hook `hook`, or (None) in a predict stage."""

    def __init__(self, hook: str | None) -> None:
        self.hook = hook

    def log(self, name: str, value: Any, **options: Any) -> None:
        if self.hook is None:
            raise MisconfigurationError(PREDICT_REFUSAL)
        raise MisconfigurationError(
            f"You can't `self.log()` inside `{self.hook}`. HINT: You can still log directly to the logger"
            " by using `self.logger.experiment`."
        )


class EpochLogs:
    """The `results` slot in a hook where Lightning logs per epoch only: other levels refused with
    its words, the rest logged into `target` (None: refused in that hook)."""

    def __init__(self, hook: str, target: Any) -> None:
        self.hook, self.target = hook, target

    def log(
        self, name: str, value: Any, *, on_step: bool | None, on_epoch: bool | None, **options: Any
    ) -> None:
        if self.target is None:
            NoLogs(self.hook).log(name, value)
        if isinstance(self.target, NoLogs):  # a predict stage's refusal
            self.target.log(name, value)
        on_step = False if on_step is None else on_step  # Lightning's defaults there
        on_epoch = True if on_epoch is None else on_epoch
        for option, given, allowed in (("on_step", on_step, False), ("on_epoch", on_epoch, True)):
            if bool(given) is not allowed:
                raise MisconfigurationError(
                    f"You can't `self.log({option}={given})` inside `{self.hook}`, must be one of ({allowed},)."
                )
        self.target.log(name, value, on_step=on_step, on_epoch=on_epoch, **options)


def _stays(previous: Any) -> bool:
    """Whether the slot's refusal stays in a hook: a predict stage's (Lightning's words there)."""
    return type(previous) is NoLogs and previous.hook is None


@contextmanager
def refusing(module: Any, hook: str) -> Iterator[None]:
    """`self.log` refused in `hook` while it runs (in a predict stage: refused as predict's)."""
    swap = getattr(module, "_swap_results", None)
    if swap is None or _stays(module._results):
        yield
        return
    previous = swap(NoLogs(hook))
    try:
        yield
    finally:
        swap(previous)


def guarded(module: Any, hook: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` (hook `hook`, a module's or a callback's) with Lightning's check of `self.log` in it;
    `fn` itself when Lightning lets that hook log as it likes."""
    swap = getattr(module, "_swap_results", None)
    if swap is None:
        return fn
    if hook in NO_LOG_HOOKS:
        refusal = NoLogs(hook)  # (made once: the batch-transfer hooks and lr_scheduler_step run per batch)

        def call(*args: Any, **kwargs: Any) -> Any:
            previous = swap(refusal)
            if _stays(previous):
                swap(previous)
            try:
                return fn(*args, **kwargs)
            finally:
                swap(previous)
    elif hook in TRAIN_EPOCH_HOOKS:

        def call(*args: Any, **kwargs: Any) -> Any:
            previous = module._results
            swap(EpochLogs(hook, previous))
            try:
                return fn(*args, **kwargs)
            finally:
                swap(previous)
    else:
        return fn
    functools.update_wrapper(call, fn)
    call.__self__ = getattr(fn, "__self__", fn)  # type: ignore[attr-defined]  # (whose hook it is)
    return call
