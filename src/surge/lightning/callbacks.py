"""`lightning.pytorch.callbacks`: surge's callbacks under Lightning's names.

Any callback `surge.callbacks` provides is found here by its name; `TQDMProgressBar` is surge's
`ProgressBar`. Lightning callbacks surge lacks are refused by name when imported.
"""

from __future__ import annotations

from typing import Any

from .. import callbacks as _surge_callbacks
from ..callbacks import Callback, EarlyStopping, LearningRateMonitor, ModelCheckpoint, ModelSummary
from ..callbacks.progress import ProgressBar
from ..errors import bad_value
from .refuse import refuse

# Lightning 2.x's callbacks; those not in surge.callbacks are refused when imported.
LIGHTNING_CALLBACKS = (
    "BackboneFinetuning", "BaseFinetuning", "BasePredictionWriter", "BatchSizeFinder", "Callback",
    "Checkpoint", "DeviceStatsMonitor", "EarlyStopping", "GradientAccumulationScheduler",
    "LambdaCallback", "LearningRateFinder", "LearningRateMonitor", "ModelCheckpoint", "ModelPruning",
    "ModelSummary", "OnExceptionCheckpoint", "ProgressBar", "RichModelSummary", "RichProgressBar",
    "SpikeDetection", "StochasticWeightAveraging", "TQDMProgressBar", "ThroughputMonitor", "Timer",
    "WeightAveraging",
)  # fmt: skip


class TQDMProgressBar(ProgressBar):
    """Lightning's `TQDMProgressBar(refresh_rate=1, process_position=0, leave=False)` as surge's
    bar. surge refreshes on a timer (every 0.5 s, reading the metrics then), not every
    `refresh_rate` batches, so a bar never costs a device read per step."""

    def __init__(self, refresh_rate: int = 1, process_position: int = 0, leave: bool = False) -> None:
        if isinstance(refresh_rate, bool) or not isinstance(refresh_rate, int) or refresh_rate < 1:
            raise bad_value(
                "TQDMProgressBar(refresh_rate)", refresh_rate,
                "an int >= 1 (to turn the bar off, pass Trainer(enable_progress_bar=False))",
            )  # fmt: skip
        if process_position != 0:
            raise bad_value("TQDMProgressBar(process_position)", process_position, "0 (one bar per job)")
        super().__init__()
        self.leave = leave


def __getattr__(name: str) -> Any:
    found = getattr(_surge_callbacks, name, None)
    if found is not None:
        return found
    if name in LIGHTNING_CALLBACKS:
        raise refuse("lightning.pytorch.callbacks", name, "surge has no such callback yet")
    raise AttributeError(f"module 'lightning.pytorch.callbacks' has no attribute {name!r}")


__all__ = [
    "Callback",
    "EarlyStopping",
    "LearningRateMonitor",
    "ModelCheckpoint",
    "ModelSummary",
    "ProgressBar",
    "TQDMProgressBar",
]
