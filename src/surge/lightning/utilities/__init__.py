"""`lightning.pytorch.utilities`: the rank-zero helpers, `apply_to_collection` (from the
`lightning-utilities` package), `AttributeDict`, moving data to a device, availability flags,
`grad_norm` and `measure_flops` (surge's own, `surge.utilities`)."""

from __future__ import annotations

from typing import Any
from warnings import filterwarnings  # `warnings` here is the submodule below, as in Lightning

import torch
from lightning_utilities.core.apply_func import apply_to_collection, apply_to_collections
from lightning_utilities.core.enums import StrEnum as LightningEnum

from ...config.clip_algorithm import GradClipAlgorithmType
from ...data import move_to_device
from ...data.combined import CombinedLoader
from ...module.hparams import AttributeDict
from ...utilities import grad_norm, measure_flops
from ..refuse import module_getattr
from .imports import _TORCHVISION_AVAILABLE
from .parameter_tying import find_shared_parameters, set_shared_parameters
from .rank_zero import (
    rank_zero_debug,
    rank_zero_deprecation,
    rank_zero_info,
    rank_zero_only,
    rank_zero_warn,
)
from .warnings import PossibleUserWarning

FLOAT16_EPSILON = torch.finfo(torch.float16).eps
FLOAT32_EPSILON = torch.finfo(torch.float32).eps
FLOAT64_EPSILON = torch.finfo(torch.float64).eps


def disable_possible_user_warnings(module: str = "") -> None:
    """Ignore `PossibleUserWarning`s (surge's warnings about a likely mistake), from `module` or all."""
    filterwarnings("ignore", category=PossibleUserWarning, module=module)


def move_data_to_device(batch: Any, device: torch.device | str | int) -> Any:
    """Every tensor in `batch` (nested lists, tuples, dicts, dataclasses) moved to `device`."""
    return move_to_device(batch, torch.device(device))


__getattr__ = module_getattr("lightning.pytorch.utilities", {})

__all__ = [
    "_TORCHVISION_AVAILABLE",
    "FLOAT16_EPSILON",
    "FLOAT32_EPSILON",
    "FLOAT64_EPSILON",
    "AttributeDict",
    "GradClipAlgorithmType",
    "CombinedLoader",
    "LightningEnum",
    "apply_to_collection",
    "apply_to_collections",
    "disable_possible_user_warnings",
    "find_shared_parameters",
    "grad_norm",
    "measure_flops",
    "move_data_to_device",
    "rank_zero_debug",
    "rank_zero_deprecation",
    "rank_zero_info",
    "rank_zero_only",
    "rank_zero_warn",
    "set_shared_parameters",
]
