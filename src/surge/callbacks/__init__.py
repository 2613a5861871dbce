"""Callbacks: checkpointing, early stopping, progress, learning-rate monitoring, the model summary,
rollback on a loss spike (`SpikeGuard`), and Lightning's others (weight averaging, finetuning, timing, tuning, device statistics)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config.lazy_names import LazyNames

if TYPE_CHECKING:
    from .accumulation import GradientAccumulationScheduler
    from .base import Callback
    from .batch_size_finder import BatchSizeFinder
    from .checkpoint import ModelCheckpoint
    from .device_stats import DeviceStatsMonitor
    from .early_stopping import EarlyStopping, EarlyStoppingReason
    from .exception_checkpoint import OnExceptionCheckpoint
    from .finetuning import BackboneFinetuning, BaseFinetuning
    from .lr_finder import LearningRateFinder
    from .lr_monitor import LearningRateMonitor
    from .prediction_writer import BasePredictionWriter
    from .progress import ProgressBar
    from .rich_progress import RichProgressBar
    from .spike_guard import SpikeError, SpikeGuard
    from .summary import ModelSummary
    from .swa import StochasticWeightAveraging
    from .throughput import Throughput
    from .throughput_monitor import ThroughputMonitor
    from .timer import Timer

_NAMES = LazyNames(
    __name__,
    {
        "GradientAccumulationScheduler": "accumulation",
        "Callback": "base",
        "BatchSizeFinder": "batch_size_finder",
        "ModelCheckpoint": "checkpoint",
        "DeviceStatsMonitor": "device_stats",
        "EarlyStopping": "early_stopping",
        "EarlyStoppingReason": "early_stopping",
        "OnExceptionCheckpoint": "exception_checkpoint",
        "BackboneFinetuning": "finetuning",
        "BaseFinetuning": "finetuning",
        "LearningRateFinder": "lr_finder",
        "LearningRateMonitor": "lr_monitor",
        "BasePredictionWriter": "prediction_writer",
        "ProgressBar": "progress",
        "RichProgressBar": "rich_progress",
        "SpikeError": "spike_guard",
        "SpikeGuard": "spike_guard",
        "ModelSummary": "summary",
        "StochasticWeightAveraging": "swa",
        "Throughput": "throughput",
        "ThroughputMonitor": "throughput_monitor",
        "Timer": "timer",
    },
)
_NAMES.install(globals())

__all__ = [
    "BackboneFinetuning",
    "BaseFinetuning",
    "BasePredictionWriter",
    "BatchSizeFinder",
    "Callback",
    "DeviceStatsMonitor",
    "EarlyStopping",
    "EarlyStoppingReason",
    "GradientAccumulationScheduler",
    "LearningRateFinder",
    "LearningRateMonitor",
    "ModelCheckpoint",
    "ModelSummary",
    "OnExceptionCheckpoint",
    "ProgressBar",
    "RichProgressBar",
    "SpikeError",
    "SpikeGuard",
    "StochasticWeightAveraging",
    "Throughput",
    "ThroughputMonitor",
    "Timer",
]
