"""`OnExceptionCheckpoint`: save the whole training state when a fit raises (Lightning's)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import bad_value
from .base import Callback

if TYPE_CHECKING:
    from ..trainer import Trainer


class OnExceptionCheckpoint(Callback):
    """On an exception in fit (KeyboardInterrupt included; not in validate/test/predict, which have
    no training state to save), write `dirpath/filename.ckpt`; a fit
    that ends well removes that file (a leftover of an earlier failure) in `teardown`."""

    FILE_EXTENSION = ".ckpt"

    def __init__(self, dirpath: str | os.PathLike[str], filename: str = "on_exception") -> None:
        if not isinstance(dirpath, str | os.PathLike):
            raise bad_value("OnExceptionCheckpoint(dirpath)", dirpath, "a path")
        if not isinstance(filename, str) or not filename or os.sep in filename:
            raise bad_value("OnExceptionCheckpoint(filename)", filename, "a file name without a directory")
        self.dirpath = dirpath
        self.filename = filename

    @property
    def ckpt_path(self) -> str:
        return os.path.join(self.dirpath, self.filename + self.FILE_EXTENSION)

    def on_exception(self, trainer: Trainer, module: Any, exception: BaseException) -> None:
        if trainer.fitting:
            Path(self.dirpath).mkdir(parents=True, exist_ok=True)
            trainer.save_checkpoint(self.ckpt_path)

    def teardown(self, trainer: Trainer, module: Any, stage: str) -> None:
        if trainer.is_global_zero and os.path.exists(self.ckpt_path):
            trainer.strategy.remove_checkpoint(self.ckpt_path)
