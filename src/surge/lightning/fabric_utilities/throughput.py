"""`lightning.fabric.utilities.throughput`: `Throughput`, `measure_flops`, `get_available_flops`;
Fabric's `ThroughputMonitor(fabric)` needs a Fabric and is refused when constructed."""

from __future__ import annotations

import torch

from ...callbacks.throughput import Throughput
from ...profiler.flops import peak_flops
from ...utilities import measure_flops
from ..refuse import refused_at_use
from ..utilities.rank_zero import rank_zero_warn

ThroughputMonitor = refused_at_use(
    "lightning.fabric.utilities.throughput",
    "ThroughputMonitor",
    "it logs through a Fabric; with the Trainer use lightning.pytorch.callbacks.ThroughputMonitor, "
    "or Throughput(...).update()/.compute() and log the values yourself",
)
_PEAK_DTYPES = (torch.bfloat16, torch.float16)


def get_available_flops(device: torch.device, dtype: torch.dtype | str) -> int | None:
    """The device's theoretical FLOP/s for `dtype`: on CUDA, the dense 16-bit peak of surge's table
    (`surge.profiler.flops.PEAK_DENSE_FLOPS`) for bfloat16/float16; None elsewhere (the CPU, other
    dtypes, a GPU not in the table: with a warning for the last two, as Lightning warns)."""
    if device.type != "cuda":
        return None
    name, peak = peak_flops(device)
    if peak is None:
        rank_zero_warn(f"FLOPs not found for {name!r}")
        return None
    if dtype not in _PEAK_DTYPES:
        rank_zero_warn(f"{name!r}: surge knows the 16-bit peak only, not the one of {dtype}")
        return None
    return int(peak)


__all__ = ["Throughput", "ThroughputMonitor", "get_available_flops", "measure_flops"]
