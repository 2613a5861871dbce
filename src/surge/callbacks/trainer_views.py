"""What the parts below the Trainer read of it, as small Protocols: each declared here once.

A hook receives the Trainer itself (the public API); a helper that is not a hook is typed by the
members it uses, so that what it depends on is stated and checked (mypy checks that the Trainer
satisfies each Protocol where a hook passes it on). Each member is declared in one view; a part
that reads several combines them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch
    from torch import Tensor
    from torch.optim import Optimizer

    from ..config.semantics import Semantics
    from ..loggers.base import Logger
    from ..module import Module
    from ..precision import Precision
    from ..strategies import Strategy


# -- the views every other one is made of ------------------------------------------------------
class Ranks(Protocol):
    """A decision every process takes alike: the process count, this process's place, the
    strategy's collectives."""

    @property
    def world_size(self) -> int: ...
    @property
    def global_rank(self) -> int: ...
    @property
    def is_global_zero(self) -> bool: ...
    @property
    def strategy(self) -> Strategy: ...


class Position(Protocol):
    """Where the fit is: the epoch and the optimizer step."""

    @property
    def current_epoch(self) -> int: ...
    @property
    def global_step(self) -> int: ...


class StageFlags(Protocol):
    """What kind of run this is: a fit, its sanity check, a fast_dev_run."""

    @property
    def fitting(self) -> bool: ...
    @property
    def sanity_checking(self) -> bool: ...
    @property
    def fast_dev_run(self) -> int: ...


class Metrics(Protocol):
    @property
    def callback_metrics(self) -> dict[str, Tensor]: ...


class Writing(Protocol):
    """Writing a checkpoint of the whole run."""

    def save_checkpoint(self, filepath: str | Path, weights_only: bool = False) -> None: ...


class Loggers(Protocol):
    @property
    def loggers(self) -> list[Logger]: ...


class MetricsLogging(Loggers, Protocol):
    """Values sent to every logger at a step."""

    def log_metrics(
        self, metrics: Mapping[str, float], step: int | None = None, callback_metrics: bool = True
    ) -> None: ...


class Schedules(Protocol):
    """The optimizers and their schedulers, as `configure_optimizers` made them."""

    @property
    def optimizers(self) -> list[Optimizer]: ...
    @property
    def lr_scheduler_configs(self) -> list[Any]: ...


class Placement(Ranks, Protocol):
    """How the module runs: the strategy (in `Ranks`) and the precision."""

    @property
    def precision_plugin(self) -> Precision: ...


class TrainData(Protocol):
    @property
    def train_dataloader(self) -> Any: ...


# -- what one part reads ------------------------------------------------------------------------
class Stopping(Ranks, Protocol):
    """A stop every process agrees on (Timer, EarlyStopping): `should_stop` is set, never cleared."""

    should_stop: bool


class Progress(Position, Metrics, Protocol):
    """What a save names and ranks by: the logged values, the epoch and the optimizer step."""


class StopCheck(Stopping, StageFlags, Progress, Protocol):
    """What EarlyStopping's check reads, besides the stop every process agrees on."""


class Saving(Ranks, Position, StageFlags, Writing, Loggers, Protocol):
    """What `ModelCheckpoint` reads and calls when it decides on, writes and replaces checkpoints."""

    @property
    def ckpt_path(self) -> str | None: ...


class CheckpointRun(Ranks, Protocol):
    """What readying ModelCheckpoint's directory reads."""

    @property
    def default_root_dir(self) -> str: ...
    @property
    def semantics(self) -> Semantics: ...


class ValidationCadence(Position, Protocol):
    """What says whether a validation follows an epoch's last batch (Lightning's arguments)."""

    @property
    def enable_validation(self) -> bool: ...
    @property
    def check_val_every_n_epoch(self) -> int | None: ...
    @property
    def val_check_interval(self) -> int | float: ...
    @property
    def num_val_batches(self) -> list[int | float]: ...


class RunDirectory(Protocol):
    @property
    def log_dir(self) -> str: ...

    @property
    def default_root_dir(self) -> str: ...


class Checkpointing(Ranks, Writing, RunDirectory, Protocol):
    """What a preemption's checkpoint needs (the fit loop's typed view of the Trainer)."""

    @property
    def checkpoint_callback(self) -> Any: ...


class Averaging(Placement, Schedules, TrainData, Protocol):
    """What starting the weight average and the BatchNorm pass read (StochasticWeightAveraging)."""

    @property
    def max_epochs(self) -> int: ...
    @property
    def num_training_batches(self) -> int | float: ...


class StatsLogging(MetricsLogging, Protocol):
    """What logging the device statistics reads (DeviceStatsMonitor)."""

    @property
    def root_device(self) -> torch.device: ...
    @property
    def log_every_n_steps(self) -> int: ...
    @property
    def should_stop(self) -> bool: ...


class LearningRates(Schedules, MetricsLogging, Position, Protocol):
    """What the LearningRateMonitor reads: the optimizers, their schedulers, the step, the loggers."""


class ProfiledFit(Placement, TrainData, RunDirectory, Protocol):
    """What the doctor reads of the Trainer whose fit it reports on."""

    @property
    def lightning_module(self) -> Module | None: ...
