"""`lightning.pytorch.utilities.signature_utils`: whether a hook takes a parameter (Lightning's helper,
which libraries use to call a user's hook with or without `dataloader_idx`)."""

from __future__ import annotations

import inspect
from collections.abc import Callable


def is_param_in_hook_signature(
    hook_fx: Callable, param: str, explicit: bool = False, min_args: int | None = None
) -> bool:
    """Whether `hook_fx` (a method: its first parameter is skipped) names `param`; unless `explicit`,
    a `*args` takes it too; with `min_args`, so does a hook with at least that many parameters. A
    decorated hook is read through its `__wrapped__` (one level)."""
    hook_fx = getattr(hook_fx, "__wrapped__", hook_fx)
    spec = inspect.getfullargspec(hook_fx)
    args = spec.args[1:]
    takes_varargs = not explicit and spec.varargs is not None
    return param in args or takes_varargs or (isinstance(min_args, int) and len(args) >= min_args)


__all__ = ["is_param_in_hook_signature"]
