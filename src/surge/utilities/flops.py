"""`measure_flops`: the FLOPs a call runs, counted by `torch.utils.flop_counter`."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def measure_flops(
    model: nn.Module,
    forward_fn: Callable[[], torch.Tensor],
    loss_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> int:
    """The FLOPs `forward_fn()` runs (with `loss_fn`, also the loss and its backward), counted by
    `torch.utils.flop_counter.FlopCounterMode`. Build the model and inputs under
    `torch.device("meta")` to count without allocating or computing anything. `model` is the
    module `forward_fn` calls (kept for Lightning's signature)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        out = forward_fn()
        if loss_fn is not None:
            loss_fn(out).backward()
    return int(counter.get_total_flops())
