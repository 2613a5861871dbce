"""`lightning.pytorch.loggers.CSVLogger`: surge's CSVLogger with Lightning's constructor.

In a module of its own whose path is private, so a command line's bare `CSVLogger` (resolved by
jsonargparse among the subclasses of Logger it can name) stays surge's one CSVLogger, which takes
Lightning's arguments too, in either CLI; a config names this one by its full class path."""

from __future__ import annotations

from pathlib import Path

from ..loggers import CSVLogger as SurgeCSVLogger


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
