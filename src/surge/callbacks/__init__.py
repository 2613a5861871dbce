"""Callbacks: checkpointing, early stopping, progress, learning-rate monitoring, the model summary."""

from .base import Callback
from .checkpoint import ModelCheckpoint
from .early_stopping import EarlyStopping
from .lr_monitor import LearningRateMonitor
from .progress import ProgressBar
from .summary import ModelSummary

__all__ = [
    "Callback",
    "EarlyStopping",
    "LearningRateMonitor",
    "ModelCheckpoint",
    "ModelSummary",
    "ProgressBar",
]
