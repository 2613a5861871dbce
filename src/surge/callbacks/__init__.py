"""Callbacks: checkpointing, early stopping, progress, learning-rate monitoring, the model summary,
rollback on a loss spike (`SpikeGuard`), and Lightning's others (weight averaging, finetuning, timing, tuning, device statistics)."""

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
