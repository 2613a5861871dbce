"""A micro-batch's backward in its accumulation window: the loss divided by the window, or, where
nothing sees the divided loss, a backward seeded with what that division would pass on.

`(loss / window).backward()` runs four ops beyond the model's: the division, `torch.ones_like`
(the seed `backward()` makes), the division's backward (`seed / window`: what reaches the loss's own
graph), and recording the division for autograd. `SeededBackward` makes that last value once, by the
same op on the same dtype and device (`torch.ones_like(loss) / window`), and starts each backward
from a fresh copy of it (one op). Every gradient is the same bits as the division gives, for any
window (a power of two or not) and any dtype. benchmarks/README.md ("The hot loop, sixth pass")
measures what it saves.

The copy is what autograd gets, never the kept value: autograd may keep the tensor it is handed (as a
`.grad`, or a view of it, when a parameter is reached through views only) and add into it later, and
a hook may write into it, as it may into the division's fresh output. The kept value is made again
when the window or the loss's dtype, shape, device or class changes. A Tensor subclass, or a loss of
several values, gets the division and `backward()` as before. The fit loop seeds only where nothing
sees the divided loss: surge's own mode (Lightning's reports the divided loss) with a plain
`Tensor.backward` (no loss scaler, no `backward` override, no `on_before_backward`/`on_after_backward`
hook)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

WindowBackward = Callable[[Any, float], Any]  # (loss, window) -> the loss the backward ran on


def window_backward(backward: Callable[[Any], None], divided_loss_seen: bool, k: int) -> WindowBackward:
    """What the fit loop hands each micro-batch's loss and window to, bound once per epoch. Without
    accumulation (`k` 1) nothing is divided: `backward()`'s own seed costs what a copy of a kept one would."""
    if backward is Tensor.backward and not divided_loss_seen and k > 1:
        return SeededBackward().run
    return DividedBackward(backward).run


class DividedBackward:
    """The loss divided by its window, then `backward` (the precision's, with the hooks around it)."""

    __slots__ = ("_backward",)

    def __init__(self, backward: Callable[[Any], None]) -> None:
        self._backward = backward

    def run(self, loss: Any, window: float) -> Any:
        scaled = loss / window if window != 1 else loss
        self._backward(scaled)
        return scaled


class SeededBackward:
    """The gradients of `(loss / window).backward()`, without the division; returns `loss`."""

    __slots__ = ("_seed", "_window")

    def __init__(self) -> None:
        # ones_like(the loss it was made for) / window: its dtype, shape and device are the loss's
        self._seed: Tensor | None = None
        self._window: float = 0

    def run(self, loss: Tensor, window: float) -> Tensor:
        seed = self._seed
        if (
            seed is None
            or window != self._window
            or loss.__class__ is not Tensor
            or loss.dtype is not seed.dtype
            or loss.shape != seed.shape
            or loss.device != seed.device
        ):
            seed = self._seed_for(loss, window)
            if seed is None:  # a subclass, or not one value: `backward()` decides (and refuses) as before
                (loss / window if window != 1 else loss).backward()
                return loss
        torch.autograd.backward(loss, seed.clone())  # (autograd may keep what it is handed, and add into it)
        return loss

    def _seed_for(self, loss: Tensor, window: float) -> Tensor | None:
        """The gradient the division's backward would hand the loss, made by the same op; None for a
        Tensor subclass (it may dispatch `backward` its own way) or a loss of several values (which
        `backward()` refuses: a seed of ones would train on their sum)."""
        if loss.__class__ is not Tensor or loss.numel() != 1:
            self._seed = None
            return None
        with torch.no_grad():
            seed = torch.ones_like(loss, memory_format=torch.preserve_format)
            if window != 1:
                seed = seed / window
        self._seed, self._window = seed, window
        return seed
