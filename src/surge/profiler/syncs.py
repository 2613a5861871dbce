"""Counting host reads (`.item()`, `float(t)`, `.cpu()`, ...) made inside `training_step`.

On a GPU each one stalls the host until the device catches up; on any device they are the habit
that keeps a loop from running ahead. Counted with a TorchFunctionMode on a few sampled steps only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_READS = {"item", "tolist", "numpy", "__float__", "__int__", "__bool__", "__index__"}
_MOVES = {"cpu", "to"}


class _Count(TorchFunctionMode):
    def __init__(self, counter: Counter) -> None:
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = getattr(func, "__name__", "")
        if name in _READS or (name in _MOVES and _leaves_device(name, args, kwargs or {})):
            self.counter[name] += 1
        return func(*args, **(kwargs or {}))


def _leaves_device(name: str, args: tuple, kwargs: dict) -> bool:
    tensor = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if tensor is None or tensor.device.type == "cpu":
        return False
    if name == "cpu":
        return True
    target = kwargs.get("device", args[1] if len(args) > 1 else None)
    return str(target).startswith("cpu")


class SyncCounter:
    """Wraps the step function; on steps `first`..`first + samples - 1` it counts host reads."""

    def __init__(self, first: int = 3, samples: int = 5) -> None:
        self.first, self.samples = first, samples
        self.counts: Counter = Counter()
        self.counted_steps = 0
        self._calls = 0

    def wrap(self, step: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self._calls += 1
            if not self.first <= self._calls < self.first + self.samples:
                return step(*args, **kwargs)
            self.counted_steps += 1
            with _Count(self.counts):
                return step(*args, **kwargs)

        return counted

    @property
    def per_step(self) -> float:
        return sum(self.counts.values()) / self.counted_steps if self.counted_steps else 0.0
