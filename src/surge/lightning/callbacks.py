"""`lightning.pytorch.callbacks`: surge's callbacks under Lightning's names.

Any callback `surge.callbacks` provides is found here by its name; `TQDMProgressBar` is surge's
`ProgressBar`. Lightning callbacks surge lacks are refused by name when imported.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from .. import callbacks as _surge_callbacks
from ..callbacks import (
    BackboneFinetuning,
    BaseFinetuning,
    BasePredictionWriter,
    BatchSizeFinder,
    Callback,
    DeviceStatsMonitor,
    EarlyStopping,
    GradientAccumulationScheduler,
    LearningRateMonitor,
    ModelCheckpoint,
    ModelSummary,
    OnExceptionCheckpoint,
    RichProgressBar,
    StochasticWeightAveraging,
    ThroughputMonitor,
    Timer,
)
from ..callbacks.progress import ProgressBar
from ..callbacks.summary import summarize
from ..errors import bad_value
from .lr_finder import LearningRateFinder
from .refuse import refuse

if TYPE_CHECKING:
    from ..trainer import Trainer

# Lightning 2.x's callbacks; those not in surge.callbacks are refused when imported.
LIGHTNING_CALLBACKS = (
    "BackboneFinetuning", "BaseFinetuning", "BasePredictionWriter", "BatchSizeFinder", "Callback",
    "Checkpoint", "DeviceStatsMonitor", "EarlyStopping", "EMAWeightAveraging", "GradientAccumulationScheduler",
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


class RichModelSummary(ModelSummary):
    """Lightning's `RichModelSummary(max_depth=1)`: the same summary as `ModelSummary`, printed as a
    rich table (needs `pip install rich`, checked here, before any work)."""

    def __init__(self, max_depth: int = 1, **summarize_kwargs: Any) -> None:
        if importlib.util.find_spec("rich") is None:
            raise ImportError("RichModelSummary needs the rich package: pip install rich")
        super().__init__(max_depth, **summarize_kwargs)

    def on_fit_start(self, trainer: Trainer, module: Any) -> None:
        if not trainer.is_global_zero:
            return
        from rich.console import Console
        from rich.table import Table

        lines = summarize(module, self.max_depth).splitlines()
        header, rows = (
            ["", *lines[0].split()],
            [line for line in lines[2:] if line and not line.startswith("-")],
        )
        table = Table(*header)
        totals = []
        for line in rows:
            cells = line.split(None, 3)
            if cells and cells[0].isdigit() and len(cells) == 4:
                table.add_row(*cells)
            else:
                totals.append(line)
        console = Console()
        console.print(table)
        console.print("\n".join(totals))


def __getattr__(name: str) -> Any:
    found = getattr(_surge_callbacks, name, None)
    if found is not None:
        return found
    if name in LIGHTNING_CALLBACKS:
        raise refuse("lightning.pytorch.callbacks", name, "surge has no such callback yet")
    if name == "Tqdm":  # the tqdm class inside Lightning's progress bar
        from .tqdm_bar import Tqdm

        return Tqdm
    raise AttributeError(f"module 'lightning.pytorch.callbacks' has no attribute {name!r}")


# Lightning's `__all__` (what `from lightning.pytorch.callbacks import *` gives) less the callbacks surge lacks.
__all__ = [
    "BackboneFinetuning",
    "BaseFinetuning",
    "BasePredictionWriter",
    "BatchSizeFinder",
    "Callback",
    "DeviceStatsMonitor",
    "EarlyStopping",
    "GradientAccumulationScheduler",
    "LearningRateFinder",
    "LearningRateMonitor",
    "ModelCheckpoint",
    "ModelSummary",
    "OnExceptionCheckpoint",
    "ProgressBar",
    "RichModelSummary",
    "RichProgressBar",
    "StochasticWeightAveraging",
    "TQDMProgressBar",
    "ThroughputMonitor",
    "Timer",
]
