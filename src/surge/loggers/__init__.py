"""Loggers: where metrics go. The default (`logger=True`) is TensorBoard's, when tensorboard is
installed, with `metrics.csv` beside it; `CSVLogger` alone otherwise. `MLFlowLogger` imports mlflow
only when its run is first used, `WandbLogger` wandb when it is made."""

from .base import Logger
from .csv import CSVLogger
from .mlflow import MLFlowLogger
from .tensorboard import TensorBoardLogger
from .wandb import WandbLogger

__all__ = ["CSVLogger", "Logger", "MLFlowLogger", "TensorBoardLogger", "WandbLogger"]
