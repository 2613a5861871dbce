"""Loggers: where metrics go. The default (`logger=True`) is TensorBoard's, when tensorboard is
installed, with `metrics.csv` beside it; `CSVLogger` alone otherwise. `MLFlowLogger` imports mlflow
only when its run is first used, `WandbLogger` wandb when it is made."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config.lazy_names import LazyNames

if TYPE_CHECKING:
    from .base import Logger
    from .csv import CSVLogger
    from .mlflow import MLFlowLogger
    from .tensorboard import TensorBoardLogger
    from .wandb import WandbLogger

_NAMES = LazyNames(
    __name__,
    {
        "Logger": "base",
        "CSVLogger": "csv",
        "MLFlowLogger": "mlflow",
        "TensorBoardLogger": "tensorboard",
        "WandbLogger": "wandb",
    },
)
_NAMES.install(globals())

__all__ = ["CSVLogger", "Logger", "MLFlowLogger", "TensorBoardLogger", "WandbLogger"]
