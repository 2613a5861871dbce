"""A model's weights in a checkpoint: keys named as the bare model names them, loaded with every
difference named, and read from any surge checkpoint (one file or sharded)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from ..errors import CheckpointError

_PREFIXES = ("module.", "_orig_mod.")


def clean_state_dict(state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """Keys without leading `module.` (DataParallel/DDP) and any `_orig_mod.` (torch.compile)."""
    cleaned = {}
    for key, value in state_dict.items():
        while key.startswith(_PREFIXES):
            key = key.split(".", 1)[1]
        cleaned[key.replace("._orig_mod.", ".")] = value
    return cleaned


def wrapper_prefixes(module: torch.nn.Module) -> list[tuple[str, str]]:
    """(wrapped, bare) key prefixes for every DataParallel/DDP/compile wrapper inside `module`."""
    from torch.nn.parallel import DataParallel, DistributedDataParallel

    pairs = []
    for name, sub in module.named_modules():
        attr = "module" if isinstance(sub, DataParallel | DistributedDataParallel) else None
        if attr is None and type(sub).__name__ == "OptimizedModule" and hasattr(sub, "_orig_mod"):
            attr = "_orig_mod"
        if attr is not None:
            base = f"{name}." if name else ""
            pairs.append((f"{base}{attr}.", base))
    return sorted(pairs, key=lambda pair: -len(pair[0]))


def bare_key(key: str, prefixes: list[tuple[str, str]]) -> str:
    """`key` with the wrapper segments of `prefixes` removed (innermost wrapper first)."""
    changed = True
    while changed:
        changed = False
        for wrapped, bare in prefixes:
            if key.startswith(wrapped):
                key, changed = bare + key[len(wrapped) :], True
                break
    return key


def bare_state_dict(module: torch.nn.Module) -> dict[str, Any]:
    """The module's state dict as the unwrapped model would name it."""
    prefixes = wrapper_prefixes(module)
    return clean_state_dict({bare_key(k, prefixes): v for k, v in module.state_dict().items()})


def apply_model_state(
    module: torch.nn.Module, state_dict: Mapping[str, Any], strict: bool, source: str
) -> list[str]:
    """Load weights, naming every missing, unexpected and mis-shaped key; returns what did not load."""
    state_dict = clean_state_dict(state_dict)
    prefixes = wrapper_prefixes(module)
    raw_state = module.state_dict()
    raw_names = {clean_state_dict({bare_key(k, prefixes): None}).popitem()[0]: k for k in raw_state}
    own = {bare: raw_state[raw] for bare, raw in raw_names.items()}
    missing = [k for k in own if k not in state_dict]
    unexpected = [k for k in state_dict if k not in own]
    shapes = [
        f"{k}: checkpoint {tuple(v.shape)} vs model {tuple(own[k].shape)}"
        for k, v in state_dict.items()
        if k in own and isinstance(v, Tensor) and v.shape != own[k].shape
    ]
    problems = [f"missing keys: {missing}"] * bool(missing) + [f"unexpected keys: {unexpected}"] * bool(
        unexpected
    )
    problems += [f"shape mismatches: {shapes}"] * bool(shapes)
    if problems and strict:
        raise CheckpointError(
            f"checkpoint {source} does not match {type(module).__name__}: " + "; ".join(problems)
        )
    mismatched = {s.split(":")[0] for s in shapes}
    module.load_state_dict(
        {raw_names[k]: v for k, v in state_dict.items() if k in own and k not in mismatched}, strict=False
    )
    return problems
