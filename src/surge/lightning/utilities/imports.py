"""Availability flags as Lightning names them (`_TORCHVISION_AVAILABLE`, `_IS_WINDOWS`, ...), each
the true answer for this environment."""

from __future__ import annotations

import operator
import platform
import sys

import torch
from lightning_utilities.core.imports import RequirementCache, compare_version, module_available

_IS_WINDOWS = platform.system() == "Windows"
_IS_INTERACTIVE = hasattr(sys, "ps1") or bool(sys.flags.interactive)
_PYTHON_GREATER_EQUAL_3_10_0 = sys.version_info >= (3, 10)
_PYTHON_GREATER_EQUAL_3_11_0 = sys.version_info >= (3, 11)
_TORCH_VERSION = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
_TORCH_GREATER_EQUAL_2_1 = _TORCH_VERSION >= (2, 1)
_TORCH_GREATER_EQUAL_2_2 = _TORCH_VERSION >= (2, 2)
_TORCH_GREATER_EQUAL_2_3 = _TORCH_VERSION >= (2, 3)
_TORCH_GREATER_EQUAL_2_4 = _TORCH_VERSION >= (2, 4)
_TORCH_EQUAL_2_4_0 = compare_version("torch", operator.eq, "2.4.0")
_TORCH_GREATER_EQUAL_2_4_1 = compare_version("torch", operator.ge, "2.4.1")
_TORCH_GREATER_EQUAL_2_5 = compare_version("torch", operator.ge, "2.5.0")
_TORCH_GREATER_EQUAL_2_6 = compare_version("torch", operator.ge, "2.6.0")
_TORCH_LESS_EQUAL_2_6 = compare_version("torch", operator.le, "2.6.0")
_NUMPY_AVAILABLE = RequirementCache("numpy")
_TORCHVISION_AVAILABLE = RequirementCache("torchvision")
_TORCHMETRICS_AVAILABLE = RequirementCache("torchmetrics")
_TENSORBOARD_AVAILABLE = RequirementCache("tensorboard")
_TENSORBOARDX_AVAILABLE = RequirementCache("tensorboardX")
_OMEGACONF_AVAILABLE = RequirementCache("omegaconf")
_RICH_AVAILABLE = RequirementCache("rich")
_JSONARGPARSE_AVAILABLE = RequirementCache("jsonargparse")
_SKLEARN_AVAILABLE = RequirementCache("scikit-learn")
_GYM_AVAILABLE = RequirementCache("gym") or RequirementCache("gymnasium")


def __getattr__(name: str) -> bool:
    """`_TORCHMETRICS_GREATER_EQUAL_1_0_0` on first use: `compare_version` imports torchmetrics
    (with transformers and scipy, about 2 s), which a script that never reads it should not pay."""
    if name == "_TORCHMETRICS_GREATER_EQUAL_1_0_0":
        value = compare_version("torchmetrics", operator.ge, "1.0.0")
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "RequirementCache",
    "_GYM_AVAILABLE",
    "_IS_INTERACTIVE",
    "_IS_WINDOWS",
    "_NUMPY_AVAILABLE",
    "_TORCHMETRICS_GREATER_EQUAL_1_0_0",  # noqa: F822 - made on first use (__getattr__)
    "_TORCH_EQUAL_2_4_0",
    "_TORCH_GREATER_EQUAL_2_4_1",
    "_TORCH_GREATER_EQUAL_2_5",
    "_TORCH_GREATER_EQUAL_2_6",
    "_TORCH_LESS_EQUAL_2_6",
    "_JSONARGPARSE_AVAILABLE",
    "_OMEGACONF_AVAILABLE",
    "_PYTHON_GREATER_EQUAL_3_10_0",
    "_PYTHON_GREATER_EQUAL_3_11_0",
    "_RICH_AVAILABLE",
    "_SKLEARN_AVAILABLE",
    "_TENSORBOARDX_AVAILABLE",
    "_TENSORBOARD_AVAILABLE",
    "_TORCHMETRICS_AVAILABLE",
    "_TORCHVISION_AVAILABLE",
    "_TORCH_GREATER_EQUAL_2_1",
    "_TORCH_GREATER_EQUAL_2_2",
    "_TORCH_GREATER_EQUAL_2_3",
    "_TORCH_GREATER_EQUAL_2_4",
    "compare_version",
    "module_available",
]
