"""A rollback's optimizer restore: in place where it can be, so that the state tensors a compiled
step or a CUDA graph holds stay the ones it holds."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer


def restore_optimizer(opt: Optimizer, saved: dict[str, Any]) -> None:
    """`opt` back to `saved` (its `state_dict()` then, copied): in place where the state has the
    same entries, so its tensors stay the ones a compiled step or a CUDA graph holds; else through
    `load_state_dict` (e.g. state created after the snapshot)."""
    params = [p for group in opt.param_groups for p in group["params"]]
    states = saved["state"]
    same = len(states) == len(opt.state) and all(
        i < len(params) and params[i] in opt.state and _same_entries(opt.state[params[i]], s)
        for i, s in states.items()
    )
    if not same:
        opt.load_state_dict(copy.deepcopy(saved))
        return
    with torch.no_grad():
        for i, entries in states.items():
            current = opt.state[params[i]]
            for key, value in entries.items():
                if isinstance(value, Tensor):
                    current[key].copy_(value)
                else:
                    current[key] = copy.deepcopy(value)
        for group, saved_group in zip(opt.param_groups, saved["param_groups"]):
            for key, value in saved_group.items():
                if key == "params":
                    continue
                if isinstance(group.get(key), Tensor) and isinstance(value, Tensor):
                    group[key].copy_(value)
                else:
                    group[key] = copy.deepcopy(value)


def _same_entries(current: Mapping[str, Any], saved: Mapping[str, Any]) -> bool:
    if current.keys() != saved.keys():
        return False
    for key, value in saved.items():
        now = current[key]
        if isinstance(value, Tensor) != isinstance(now, Tensor):
            return False
        if isinstance(value, Tensor) and (value.shape != now.shape or value.dtype != now.dtype):
            return False
    return True
