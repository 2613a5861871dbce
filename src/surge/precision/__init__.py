"""Precision plugins, one family per file, chosen by `precision=`; each file registers its names."""

from __future__ import annotations

from typing import cast

from ..config.registry import PRECISIONS, register_precision
from ..config.semantics import SURGE, Semantics
from ..rank_zero import warn
from .base import Precision
from .full import DoublePrecision, FullPrecision
from .half import HalfPrecision
from .mixed import MixedPrecision

__all__ = [
    "DoublePrecision",
    "FullPrecision",
    "HalfPrecision",
    "MixedPrecision",
    "Precision",
    "precision_plugin",
    "register_precision",
]

FP16_ON_CPU = (  # Lightning's words
    "You passed `Trainer(accelerator='cpu', precision='16-mixed')` but AMP with fp16 is not supported on CPU. "
    "Using `precision='bf16-mixed'` instead."
)
KEEP_FP16 = (  # surge's own API: how to have fp16 on the CPU all the same
    "(surge: to run fp16 autocast and its loss scaler on the CPU anyway, pass the plugin: "
    'precision=surge.precision.MixedPrecision(torch.float16, "cpu").)'
)


def precision_plugin(precision: str | Precision, device_type: str, semantics: Semantics = SURGE) -> Precision:
    """The plugin for a registered precision name on a device type; a plugin object as it is.
    "16-mixed" on the CPU is "bf16-mixed", said in a warning (as Lightning, in both modes)."""
    if isinstance(precision, Precision):
        return precision
    if precision == "16-mixed" and device_type == "cpu":
        warn(f"{FP16_ON_CPU} {KEEP_FP16}" if semantics.fp16_on_cpu_advice else FP16_ON_CPU)
        precision = "bf16-mixed"
    cls = cast("type[Precision]", PRECISIONS.get(precision))  # registered by register_precision
    return cls.from_name(precision, device_type)
