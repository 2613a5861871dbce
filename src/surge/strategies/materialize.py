"""Meta-device models made real after they are sharded: a model built on `torch.device("meta")`
takes no memory until each rank allocates only its own shards (`to_empty`) and every layer fills
them again with its `reset_parameters()` (torchtitan's recipe for models too large for one device)."""

from __future__ import annotations

import itertools

import torch
from torch import nn

from ..rank_zero import warn


def is_meta(module: nn.Module) -> bool:
    """True when some parameter or buffer of `module` is on the meta device (has no memory yet)."""
    return any(t.is_meta for t in itertools.chain(module.parameters(), module.buffers()))


def materialize(module: nn.Module, device: torch.device) -> None:
    """Allocate `module`'s meta parameters and buffers on `device` and initialize them; no-op otherwise."""
    if not is_meta(module):
        return
    module.to_empty(device=device)  # on the root: every shard allocated at once
    without = set()
    for sub in module.modules():
        if next(itertools.chain(sub.parameters(recurse=False), sub.buffers(recurse=False)), None) is None:
            continue
        reset = getattr(sub, "reset_parameters", None)
        if callable(reset):
            reset()
        else:
            without.add(type(sub).__name__)
    if without:
        warn(
            f"the model was built on the meta device, and {', '.join(sorted(without))} define no "
            "reset_parameters(): their parameters and buffers hold uninitialized memory. Give them a "
            "reset_parameters() method, or load their values from a checkpoint."
        )
