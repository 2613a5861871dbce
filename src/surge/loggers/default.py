"""The loggers `logger=True` gives: TensorBoard's when tensorboard is installed (as Lightning's
default, so `self.logger.experiment` is a `SummaryWriter`), with `metrics.csv` beside it in the
same run directory (what `surge plot` and the doctor read); CSV alone otherwise. In the Lightning
mode the run directory holds exactly Lightning's files: TensorBoard's alone (CSV without it)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ..config.semantics import SURGE, Semantics
from .base import Logger
from .csv import CSVLogger
from .tensorboard import TensorBoardLogger


def tensorboard_available() -> bool:
    """Whether the tensorboard package is installed (found, not imported)."""
    return importlib.util.find_spec("tensorboard") is not None


def default_loggers(root: Path, semantics: Semantics = SURGE) -> list[Logger]:
    """`[TensorBoardLogger, CSVLogger]` sharing `root/surge_logs/version_N`, or `[CSVLogger]`
    (`Semantics.csv_beside_tensorboard`)."""
    if not tensorboard_available():
        return [CSVLogger(root)]
    board = TensorBoardLogger(root)
    if not semantics.csv_beside_tensorboard:
        return [board]
    csv = CSVLogger(root)
    csv._run = board._run  # one run directory, claimed once, for both
    return [board, csv]
