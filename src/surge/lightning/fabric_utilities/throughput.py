"""`lightning.fabric.utilities.throughput`: `Throughput`, `measure_flops`, `get_available_flops`;
Fabric's `ThroughputMonitor(fabric)` needs a Fabric and is refused when constructed."""

from __future__ import annotations

from ...callbacks.throughput import Throughput, get_available_flops
from ...utilities import measure_flops
from ..refuse import refused_at_use

ThroughputMonitor = refused_at_use(
    "lightning.fabric.utilities.throughput",
    "ThroughputMonitor",
    "it logs through a Fabric; with the Trainer use lightning.pytorch.callbacks.ThroughputMonitor, "
    "or Throughput(...).update()/.compute() and log the values yourself",
)
__all__ = ["Throughput", "ThroughputMonitor", "get_available_flops", "measure_flops"]
