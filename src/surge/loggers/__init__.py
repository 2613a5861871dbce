"""Loggers: where metrics go. `CSVLogger` is the default."""

from .base import Logger
from .csv import CSVLogger

__all__ = ["CSVLogger", "Logger"]
