"""What a Trainer shows: the read-only state callbacks and users read (`trainer.global_step`,
`trainer.callback_metrics`, ...), and two small public helpers for callbacks. A base of `Trainer`
only; the attributes it reads are set by `Trainer.__init__` and its setup."""

from __future__ import annotations

import math
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..arguments import TrainerConfig
from ..arguments.declared import argument_view
from ..errors import MisconfigurationError
from ..loops.run_status import RunningStage, TrainerState, trainer_state
from .fit_data_views import FitDataViews

if TYPE_CHECKING:
    from ..accelerators import Accelerator
    from ..callbacks.base import Callback
    from ..config.semantics import Semantics
    from ..loggers.base import Logger
    from ..metrics.publisher import MetricsPublisher
    from ..metrics.results import Results
    from ..module import Module
    from ..optim import Optimization
    from ..precision import Precision
    from ..profiler.goodput import Goodput, GoodputLedger
    from ..strategies import Strategy


class TrainerProperties(FitDataViews):
    """The Trainer's public read-only views (Lightning's names)."""

    _cfg: TrainerConfig
    _goodput: GoodputLedger
    _semantics: Semantics
    _accelerator: Accelerator
    _devices: list[int]
    _strategy: Strategy
    _precision: Precision
    _module: Module | None
    _optim: Optimization | None
    _publisher: MetricsPublisher
    _train_results: Results
    _log_dir: str | None
    loggers: list[Logger]
    callbacks: list[Callback]
    _run_status: str = "initializing"  # a stage's name while it runs, then finished/interrupted/failed
    _fn: str | None = None  # the entry point called last (Lightning's trainer.state.fn)
    ckpt_path: str | None = None  # the checkpoint the last stage loaded (Lightning's trainer.ckpt_path)

    @property
    def lightning_module(self) -> Module | None:
        return self._module

    model = lightning_module

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        return self._optim.optimizers if self._optim is not None else []

    @property
    def lr_scheduler_configs(self) -> list[Any]:
        return self._optim.schedulers if self._optim is not None else []

    @property
    def precision_plugin(self) -> Precision:
        return self._precision

    @property
    def strategy(self) -> Strategy:
        return self._strategy

    @property
    def global_step(self) -> int:
        """Optimizer steps taken."""
        return self.fit_loop.global_step

    @property
    def current_epoch(self) -> int:
        return self.fit_loop.epoch + int(self.fit_loop.stopped_inside)  # a stop inside an epoch counts it

    @property
    def callback_metrics(self) -> dict[str, torch.Tensor]:
        return self._publisher.callback_metrics

    @property
    def logged_metrics(self) -> dict[str, torch.Tensor]:
        return self._publisher.logged_metrics

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        return self._publisher.progress_bar_metrics

    def log_metrics(
        self, metrics: Mapping[str, float], step: int | None = None, callback_metrics: bool = True
    ) -> None:
        """Publish values a callback computed on the host, as Lightning's callbacks do: to the
        loggers (rank zero) at `step` (default: the current global step) in a row with no epoch
        value, and to `callback_metrics` unless `callback_metrics=False`; not to `logged_metrics`,
        which hold what the module logged with `self.log`."""
        step = self.global_step if step is None else step
        self._publisher.publish_from_callback(metrics, step, callback_metrics)

    def read_progress_bar_metrics(self) -> dict[str, float]:
        """The current training step's `prog_bar=True` values, read from the device now (a host
        read: call it at refresh points, not every step), with the last published ones."""
        shown = dict(self._train_results.read_step(only_prog_bar=True))
        shown.update({k: v for k, v in self._publisher.published_progress_bar().items() if k not in shown})
        return shown

    @property
    def goodput(self) -> Goodput | None:
        """Where the job's wall time went, by category, across the runs it resumed (the current or
        last fit's accounting; None before any fit). See docs/long_runs.md."""
        ledger = self._goodput
        if not ledger.used:
            return None
        return ledger.report(self.global_step, self.global_step * self.accumulate_grad_batches)

    @property
    def semantics(self) -> Semantics:
        """Whose behaviour this run follows where surge's and Lightning's differ (read once, when the
        Trainer was built): `surge.config.semantics.SURGE`, or `LIGHTNING` under `surge run`."""
        return self._semantics

    @property
    def root_device(self) -> torch.device:
        """The device this process trains on."""
        local = self.local_rank
        return self._accelerator.device(self._devices[local] if local < len(self._devices) else local)

    @property
    def logger(self) -> Logger | None:
        return self.loggers[0] if self.loggers else None

    @property
    def log_dir(self) -> str:
        """The run directory: the first logger's, else `default_root_dir` (the same on every rank);
        a str, as Lightning's (it joins with `+` and serialises to JSON as users expect)."""
        if self._log_dir is not None:
            return self._log_dir
        for lg in self.loggers:
            if lg.log_dir is not None:
                return str(lg.log_dir)
        return self.default_root_dir

    @property
    def checkpoint_callbacks(self) -> list[Any]:
        from ..callbacks.checkpoint import ModelCheckpoint

        return [cb for cb in self.callbacks if isinstance(cb, ModelCheckpoint)]

    @property
    def checkpoint_callback(self) -> Any:
        cbs = self.checkpoint_callbacks
        return cbs[0] if cbs else None

    @property
    def early_stopping_callbacks(self) -> list[Any]:
        from ..callbacks.early_stopping import EarlyStopping

        return [cb for cb in self.callbacks if isinstance(cb, EarlyStopping)]

    @property
    def early_stopping_callback(self) -> Any:
        cbs = self.early_stopping_callbacks
        return cbs[0] if cbs else None

    @property
    def progress_bar_callback(self) -> Any:
        from ..callbacks.progress import ProgressBar

        return next((cb for cb in self.callbacks if isinstance(cb, ProgressBar)), None)

    @property
    def global_rank(self) -> int:
        return self._strategy.global_rank

    @property
    def local_rank(self) -> int:
        return self._strategy.local_rank

    @property
    def node_rank(self) -> int:
        return self._strategy.node_rank

    @property
    def world_size(self) -> int:
        return self._strategy.world_size

    @property
    def is_global_zero(self) -> bool:
        return self._strategy.is_global_zero

    # -- what runs now (Lightning's stage flags) ----------------------------------------------
    @property
    def state(self) -> TrainerState:
        """Lightning's `trainer.state`: `.status`, `.fn`, `.stage`, `.finished` (a snapshot)."""
        return trainer_state(self._run_status, self._fn, self._stage())

    def _stage(self) -> RunningStage | None:
        if self.sanity_checking:
            return RunningStage.SANITY_CHECKING
        for flag, stage in ((self.training, RunningStage.TRAINING), (self.validating, RunningStage.VALIDATING),
                            (self.testing, RunningStage.TESTING), (self.predicting, RunningStage.PREDICTING)):  # fmt: skip
            if flag:
                return stage
        return None

    @property
    def training(self) -> bool:
        """Training steps run now (fit, outside its sanity check and validation)."""
        return self._run_status == "fit" and not self.sanity_checking and self.training_rng is None

    @property
    def fitting(self) -> bool:
        """fit() runs now (its sanity check and validation included)."""
        return self._run_status == "fit"

    @property
    def validating(self) -> bool:
        """validate() runs, or fit's validation (not its sanity check)."""
        in_fit = self._run_status == "fit" and not self.sanity_checking and self.training_rng is not None
        return self._run_status == "validate" or in_fit

    @property
    def testing(self) -> bool:
        return self._run_status == "test"

    @property
    def predicting(self) -> bool:
        return self._run_status == "predict"

    @property
    def evaluating(self) -> bool:
        """Validation, test or the sanity check runs now."""
        return self.validating or self.testing or self.sanity_checking

    @property
    def interrupted(self) -> bool:
        """The last stage ended by an exception (Ctrl-C, preemption or an error), as in Lightning."""
        return self._run_status in ("interrupted", "failed")

    @property
    def received_sigterm(self) -> bool:
        """This fit received SIGTERM (it checkpoints and stops at the next step boundary)."""
        ctx = self.fit_loop.ctx
        return ctx is not None and ctx.signals.received == signal.SIGTERM

    # -- the arguments (Lightning's names): the validated config's fields, declared there ------
    max_epochs = argument_view(TrainerConfig.max_epochs)  # None given: 1000, or -1 under a step/time limit
    min_epochs = argument_view(TrainerConfig.min_epochs)
    max_steps = argument_view(TrainerConfig.max_steps)
    max_time = argument_view(TrainerConfig.max_time)
    limit_train_batches = argument_view(TrainerConfig.limit_train_batches)
    limit_val_batches = argument_view(TrainerConfig.limit_val_batches)
    limit_test_batches = argument_view(TrainerConfig.limit_test_batches)
    limit_predict_batches = argument_view(TrainerConfig.limit_predict_batches)
    val_check_interval = argument_view(TrainerConfig.val_check_interval)
    check_val_every_n_epoch = argument_view(TrainerConfig.check_val_every_n_epoch)
    num_sanity_val_steps = argument_view(TrainerConfig.num_sanity_val_steps)
    barebones = argument_view(TrainerConfig.barebones)
    gradient_clip_val = argument_view(TrainerConfig.gradient_clip_val)
    gradient_clip_algorithm = argument_view(TrainerConfig.gradient_clip_algorithm)
    num_nodes = argument_view(TrainerConfig.num_nodes)
    default_root_dir = argument_view(TrainerConfig.default_root_dir)
    log_every_n_steps = argument_view(TrainerConfig.log_every_n_steps)
    fast_dev_run = argument_view(TrainerConfig.fast_dev_run)  # batches per stage (True is 1); 0: off
    overfit_batches = argument_view(TrainerConfig.overfit_batches)
    reload_dataloaders_every_n_epochs = argument_view(TrainerConfig.reload_dataloaders_every_n_epochs)

    @property
    def precision(self) -> str:
        """The precision's name, e.g. "32-true" or "bf16-mixed"."""
        return self._precision.name

    @property
    def accelerator(self) -> Accelerator:
        return self._accelerator

    @property
    def num_devices(self) -> int:
        """Devices per node."""
        return len(self._devices)

    @property
    def device_ids(self) -> list[int]:
        """The device indices this node trains on."""
        return list(self._devices)

    @property
    def estimated_stepping_batches(self) -> int | float:
        """Optimizer steps this fit will take (for schedulers such as OneCycleLR)."""
        if (
            self._fit_data is not None
        ):  # as Lightning: asked in configure_optimizers, it asks for the train loader
            self._fit_data.ask_train()
        per_epoch = math.ceil(self.num_training_batches / self.accumulate_grad_batches)
        total = per_epoch * (self.max_epochs if self.max_epochs >= 0 else math.inf)
        return min(total, self._cfg.max_steps) if self._cfg.max_steps >= 0 else total

    def export(self, path: str | Path, module: str | None = None) -> Path:
        """Write the model's bare weights (or one submodule's) to a `.safetensors` file (`surge.export_safetensors`).
        Every process calls it, as `save_checkpoint`: a sharded model (FSDP, a mesh) is gathered first."""
        if self._module is None:
            raise MisconfigurationError("export() needs a model: call fit() first.")
        from ..checkpoint.export import export_safetensors

        state = self._strategy.full_model_state(self._module)  # a collective when the weights are sharded
        return export_safetensors(state, path, module) if self.is_global_zero else Path(path)
