"""Printing and warning from rank zero only; library code never calls bare `print`."""

from __future__ import annotations

import logging
import os
import sys
import warnings

log = logging.getLogger("surge")


def global_rank() -> int:
    """This process's rank, from the environment a launcher set (0 when alone)."""
    for var in ("RANK", "SLURM_PROCID"):
        value = os.environ.get(var)
        if value is not None and value.isdigit():
            return int(value)
    return 0


class SurgeWarning(UserWarning):
    """A warning issued by surge."""


def _ensure_handler() -> None:
    # To standard error, as Lightning's messages and Python's logging go: standard output stays the
    # script's own (a results table `show` writes, what the user prints).
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


def lightning_log() -> logging.Logger:
    """The "lightning.pytorch" logger set up as Lightning sets it up: INFO, to standard error unless
    the root logger has handlers (then its records propagate there). Its `rank_zero_info` lines go
    through the child "lightning.pytorch.utilities.rank_zero"."""
    logger = logging.getLogger("lightning.pytorch")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    if not logging.getLogger().hasHandlers() and not logger.handlers:
        logger.addHandler(logging.StreamHandler())
        logger.propagate = False
    return logger


def info(message: str) -> None:
    """Tell the user something, once per job (rank zero), on standard error."""
    if global_rank() == 0:
        _ensure_handler()
        log.info(message)


def show(text: str) -> None:
    """Write `text` to standard output (rank zero), as `print` would: output the user asked for
    (a results table), not a log record."""
    if global_rank() == 0:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


def warn(message: str, stacklevel: int = 2) -> None:
    """Warn once per job (rank zero)."""
    if global_rank() == 0:
        warnings.warn(message, SurgeWarning, stacklevel=stacklevel + 1)
