"""`Strategy.tensor_init_context(empty_init=...)` of Lightning's strategy objects: layers created
inside land on the strategy's device, in its precision plugin's dtype, and with `empty_init=True`
skip `torch.nn.init`'s initialisation (for weights a checkpoint overwrites next)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode


class SkipInit(TorchFunctionMode):
    """Calls of a `torch.nn.init` function return their tensor untouched (no random draw, no write)."""

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if getattr(func, "__module__", None) == "torch.nn.init":
            return kwargs["tensor"] if "tensor" in kwargs else args[0]
        return func(*args, **kwargs)


@contextlib.contextmanager
def tensor_init_context(
    device: torch.device | None, precision: Any, empty_init: bool | None
) -> Iterator[None]:
    """On `device` (None: torch's default), in `precision`'s init dtype (a Lightning precision plugin,
    or None), skipping initialisation when `empty_init` is true."""
    with contextlib.ExitStack() as stack:
        if device is not None:
            stack.enter_context(device)
        if precision is not None:
            stack.enter_context(precision.tensor_init_context())
        if empty_init:
            stack.enter_context(SkipInit())
        yield
