"""`lightning.pytorch.loggers`: surge's CSV and TensorBoard loggers, which take Lightning's
arguments (`flush_logs_every_n_steps`, `default_hp_metric`, an empty `prefix`, no `sub_dir`), and
its `MLFlowLogger` and `WandbLogger` (Lightning's constructor arguments)."""

from __future__ import annotations

from pathlib import Path

from ..loggers import CSVLogger as SurgeCSVLogger
from ..loggers import Logger, MLFlowLogger, TensorBoardLogger, WandbLogger
from .refuse import module_getattr


class CSVLogger(SurgeCSVLogger):
    """surge's CSVLogger with Lightning's constructor (its arguments, order and defaults), so a
    LightningCLI config names what Lightning's names."""

    def __init__(
        self,
        save_dir: str | Path,
        name: str | None = "lightning_logs",
        version: int | str | None = None,
        prefix: str = "",
        flush_logs_every_n_steps: int = 100,
    ) -> None:
        super().__init__(save_dir, name, version, flush_every=flush_logs_every_n_steps, prefix=prefix)


__getattr__ = module_getattr(
    "lightning.pytorch.loggers",
    {
        name: "surge writes CSV, TensorBoard, MLflow and W&B; pass a surge.loggers.Logger subclass of your own"
        for name in ("CometLogger", "NeptuneLogger", "LitLogger")
    },
)

__all__ = ["CSVLogger", "Logger", "MLFlowLogger", "TensorBoardLogger", "WandbLogger"]
