"""`lightning.fabric.utilities`: the helpers Lightning scripts import from Fabric's utilities,
each with Lightning's behaviour; the few that need a Fabric are refused when used."""

from __future__ import annotations

from lightning_utilities.core.enums import StrEnum as LightningEnum

from ..utilities.rank_zero import rank_zero_deprecation, rank_zero_info, rank_zero_only, rank_zero_warn
from .apply_func import move_data_to_device
from .data import AttributeDict, suggested_max_num_workers
from .distributed import is_shared_filesystem
from .throughput import Throughput, ThroughputMonitor, measure_flops
from .warnings import disable_possible_user_warnings

__all__ = [
    "AttributeDict",
    "LightningEnum",
    "Throughput",
    "ThroughputMonitor",
    "disable_possible_user_warnings",
    "is_shared_filesystem",
    "measure_flops",
    "move_data_to_device",
    "rank_zero_deprecation",
    "rank_zero_info",
    "rank_zero_only",
    "rank_zero_warn",
    "suggested_max_num_workers",
]
