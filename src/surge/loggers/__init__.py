"""Loggers: where metrics go. The default (`logger=True`) is TensorBoard's, when tensorboard is
installed, with `metrics.csv` beside it; `CSVLogger` alone otherwise."""

from .base import Logger
from .csv import CSVLogger
from .tensorboard import TensorBoardLogger

__all__ = ["CSVLogger", "Logger", "TensorBoardLogger"]
