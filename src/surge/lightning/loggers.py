"""`lightning.pytorch.loggers`: surge's CSV and TensorBoard loggers with Lightning's signatures
(the run directory defaults to `save_dir/lightning_logs/version_N`, as there)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import loggers as _surge
from ..errors import bad_value
from ..loggers import Logger
from .refuse import module_getattr



class CSVLogger(_surge.CSVLogger):
    """Lightning's `CSVLogger(save_dir, name="lightning_logs", version=None, prefix="",
    flush_logs_every_n_steps=100)`: `metrics.csv` and `hparams.yaml` in `save_dir/name/version_N`."""

    def __init__(
        self,
        save_dir: str | Path,
        name: str | None = "lightning_logs",
        version: int | str | None = None,
        prefix: str = "",
        flush_logs_every_n_steps: int = 100,
    ) -> None:
        _no_prefix("CSVLogger", prefix)
        super().__init__(save_dir, name or "", version, flush_every=flush_logs_every_n_steps)


class TensorBoardLogger(_surge.TensorBoardLogger):
    """Lightning's `TensorBoardLogger(save_dir, name="lightning_logs", version=None,
    log_graph=False, default_hp_metric=True, prefix="", sub_dir=None, flush_secs=30)`.
    `self.logger.experiment` is the `SummaryWriter` (`add_scalar`, `add_image`, ...).
    surge writes no `hp_metric` placeholder (`default_hp_metric` may be True or False)."""

    def __init__(
        self,
        save_dir: str | Path,
        name: str | None = "lightning_logs",
        version: int | str | None = None,
        log_graph: bool = False,
        default_hp_metric: bool = True,
        prefix: str = "",
        sub_dir: str | Path | None = None,
        **kwargs: Any,
    ) -> None:
        _no_prefix("TensorBoardLogger", prefix)
        if sub_dir is not None:
            raise bad_value("TensorBoardLogger(sub_dir)", sub_dir, "None (surge writes into version_N itself)")
        unknown = set(kwargs) - {"flush_secs"}
        if unknown:
            raise bad_value("TensorBoardLogger(**kwargs)", sorted(unknown), "only flush_secs is supported")
        if not isinstance(default_hp_metric, bool):
            raise bad_value("TensorBoardLogger(default_hp_metric)", default_hp_metric, "True or False")
        super().__init__(save_dir, name or "", version, log_graph, kwargs.get("flush_secs", 30))


def _no_prefix(cls: str, prefix: str) -> None:
    if prefix:
        raise bad_value(f"{cls}(prefix)", prefix, '"" (name the metrics with the prefix in self.log)')


__getattr__ = module_getattr(
    "lightning.pytorch.loggers",
    {
        name: "surge writes CSV and TensorBoard; pass a surge.loggers.Logger subclass of your own"
        for name in ("WandbLogger", "MLFlowLogger", "CometLogger", "NeptuneLogger", "LitLogger")
    },
)

__all__ = ["CSVLogger", "Logger", "TensorBoardLogger"]
