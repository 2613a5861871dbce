"""`lightning.pytorch.utilities`: the rank-zero helpers, `apply_to_collection` (from the
`lightning-utilities` package), `AttributeDict`, moving data to a device, availability flags,
`grad_norm` and `measure_flops` (surge's own, `surge.utilities`)."""

from __future__ import annotations

from typing import Any

import torch
from lightning_utilities.core.apply_func import apply_to_collection, apply_to_collections
from lightning_utilities.core.enums import StrEnum as LightningEnum

from ...data import move_to_device
from ...module.hparams import AttributeDict
from ...utilities import grad_norm, measure_flops
from ..refuse import module_getattr
from .imports import _TORCHVISION_AVAILABLE
from .rank_zero import (
    rank_zero_debug,
    rank_zero_deprecation,
    rank_zero_info,
    rank_zero_only,
    rank_zero_warn,
)


def move_data_to_device(batch: Any, device: torch.device | str | int) -> Any:
    """Every tensor in `batch` (nested lists, tuples, dicts, dataclasses) moved to `device`."""
    return move_to_device(batch, torch.device(device))


__getattr__ = module_getattr(
    "lightning.pytorch.utilities",
    {
        "CombinedLoader": "pass a list of loaders to fit/validate/test instead",
    },
)

__all__ = [
    "_TORCHVISION_AVAILABLE",
    "AttributeDict",
    "LightningEnum",
    "apply_to_collection",
    "apply_to_collections",
    "grad_norm",
    "measure_flops",
    "move_data_to_device",
    "rank_zero_debug",
    "rank_zero_deprecation",
    "rank_zero_info",
    "rank_zero_only",
    "rank_zero_warn",
]
