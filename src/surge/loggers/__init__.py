"""Loggers: where metrics go. `CSVLogger` is the default."""

from .base import Logger
from .csv import CSVLogger
from .tensorboard import TensorBoardLogger

__all__ = ["CSVLogger", "Logger", "TensorBoardLogger"]
