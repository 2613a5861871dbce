"""`lightning.pytorch.loggers`: surge's CSV and TensorBoard loggers, which take Lightning's
arguments (`flush_logs_every_n_steps`, `default_hp_metric`, an empty `prefix`, no `sub_dir`), and
its `MLFlowLogger` and `WandbLogger` (Lightning's constructor arguments)."""

from __future__ import annotations

from ..loggers import Logger, MLFlowLogger, TensorBoardLogger, WandbLogger
from ._csv_logger import CSVLogger
from .refuse import module_getattr

__getattr__ = module_getattr(
    "lightning.pytorch.loggers",
    {
        name: "surge writes CSV, TensorBoard, MLflow and W&B; pass a surge.loggers.Logger subclass of your own"
        for name in ("CometLogger", "NeptuneLogger", "LitLogger")
    },
)

__all__ = ["CSVLogger", "Logger", "MLFlowLogger", "TensorBoardLogger", "WandbLogger"]
