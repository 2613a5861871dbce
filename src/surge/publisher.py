"""Where host metrics go once read: `callback_metrics`, the progress bar, and the loggers."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from .data import move_to_device
from .loggers.base import Logger
from .module import Module

Flags = Mapping[str, tuple[bool, bool, str]]  # key -> (prog_bar, logger, name without its _step/_epoch)


class MetricsPublisher:
    """Routes metrics already read to the host. Owns the three dicts the Trainer shows as
    `callback_metrics`, `logged_metrics` and `progress_bar_metrics`; only rank zero writes to loggers."""

    def __init__(
        self, loggers: Sequence[Logger], is_global_zero: Callable[[], bool], epoch: Callable[[], int]
    ) -> None:
        self.loggers, self.is_global_zero, self.epoch = list(loggers), is_global_zero, epoch
        self.callback_metrics: dict[str, torch.Tensor] = {}
        self.logged_metrics: dict[str, torch.Tensor] = {}
        self.progress_bar_metrics: dict[str, float] = {}

    def publish(
        self,
        metrics: Mapping[str, float],
        flags: Flags,
        step: int,
        evaluation: bool = False,
        to_loggers: bool = True,
    ) -> None:
        """Make `metrics` visible; `evaluation` results keep a training metric's plain name."""
        logged = {}
        for key, value in metrics.items():
            prog_bar, to_logger, name = flags.get(key, (False, True, key))
            tensor = torch.tensor(value)
            self.callback_metrics[key] = tensor
            if name != key and (
                key.endswith("_epoch") or name not in self.callback_metrics or not evaluation
            ):
                self.callback_metrics[name] = tensor
            if prog_bar:
                self.progress_bar_metrics[key] = value
            if to_logger:
                logged[key] = value
        if logged and to_loggers:
            self.logged_metrics.update({k: torch.tensor(v) for k, v in logged.items()})
            if self.loggers and self.is_global_zero():
                row = {**logged, "epoch": self.epoch()}
                for lg in self.loggers:
                    lg.log_metrics(row, step)

    def log_run_start(self, module: Module) -> None:
        """The module's hyper-parameters, and its graph where a logger asks for it (rank zero)."""
        if not (self.loggers and self.is_global_zero()):
            return
        example = getattr(module, "example_input_array", None)
        for lg in self.loggers:
            if module.hparams:
                lg.log_hyperparams(module.hparams)
            if getattr(lg, "log_graph", False) and example is not None:
                graph_logger: Any = lg  # one that has log_graph (TensorBoardLogger) has log_module_graph
                graph_logger.log_module_graph(module, move_to_device(example, module.device))

    def finalize_loggers(self, status: str) -> None:
        """Close the loggers with the stage's outcome ("success", "failed", "interrupted"; rank zero)."""
        if self.is_global_zero():
            for lg in self.loggers:
                lg.finalize(status)

    def save_loggers(self) -> None:
        """Flush the loggers' buffered rows (rank zero)."""
        if self.is_global_zero():
            for lg in self.loggers:
                lg.save()
