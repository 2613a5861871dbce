"""`TensorBoardLogger`: scalars and hyper-parameters as TensorBoard event files (rank zero writes).

The tensorboard package is imported when the first event is written, not by `import surge`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import SurgeRuntimeError
from ..hparams import plain
from .base import Logger, RunDir


class TensorBoardLogger(Logger):
    """Writes to `save_dir/name/version_N/` (the same layout as `CSVLogger`), viewable with
    `tensorboard --logdir save_dir`. `log_graph=True` records the module's graph once at fit start,
    traced from the module's `example_input_array`."""

    def __init__(
        self,
        save_dir: str | Path = ".",
        name: str = "surge_logs",
        version: int | str | None = None,
        log_graph: bool = False,
        flush_secs: int = 30,
    ) -> None:
        self._run = RunDir(save_dir, name, version)
        self._writer: Any = None
        self.log_graph = log_graph
        self._flush_secs = flush_secs

    @property
    def name(self) -> str:
        return self._run.name

    @property
    def log_dir(self) -> Path:
        return self._run.path

    @property
    def version(self) -> int | str | None:
        return self._run.version

    @property
    def experiment(self) -> Any:
        """The `torch.utils.tensorboard.SummaryWriter` (created on first use)."""
        if self._writer is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as err:
                raise SurgeRuntimeError(
                    "TensorBoardLogger needs the tensorboard package: pip install tensorboard"
                ) from err
            self._writer = SummaryWriter(log_dir=str(self.log_dir), flush_secs=self._flush_secs)
        return self._writer

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        writer = self.experiment
        for key, value in metrics.items():
            if key != "epoch":
                writer.add_scalar(key, value, global_step=step)
        if "epoch" in metrics:
            writer.add_scalar("epoch", metrics["epoch"], global_step=step)

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        values = {
            k: v if isinstance(v, int | float | str | bool) else str(v)
            for k, v in plain(dict(params)).items()
        }
        self.experiment.add_hparams(values, {}, run_name=".")

    def log_module_graph(self, module: Any, example: Any) -> None:
        """Record the module's graph from one example input."""
        self.experiment.add_graph(module, example)

    def save(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def finalize(self, status: str) -> None:
        if self._writer is not None:
            self._writer.flush()
            self._writer.close()
            self._writer = None
