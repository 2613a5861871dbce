"""`surge.Trainer`: validates its arguments, assembles the parts, and runs the loops."""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from . import data as data_mod
from . import speed
from .accelerators import resolve_accelerator, resolve_devices
from .assembly import batch_mover, build_callbacks, build_loggers, build_strategy, set_deterministic
from .callbacks.base import Callback
from .config import TrainerConfig
from .datamodule import DataModule
from .errors import MisconfigurationError, SurgeTypeError
from .launch.environment import detect
from .loader_prep import prepare_loader
from .loggers.base import Logger
from .loops.context import FitContext, FitSettings, RunParts
from .loops.evaluate import run_evaluation
from .loops.fit import FitLoop
from .loops.hooks import Hooks
from .loops.predict import run_prediction
from .loops.validation import BatchPlan, Validation, plan_batches
from .module import Module
from .nonfinite import NonFiniteGuard
from .optim import Optimization, parse_optimizers
from .paths import writable_dir
from .precision import Precision, precision_plugin
from .profiler import Profiler, build_profiler
from .profiler.doctor import requested as requested_doctor_run
from .publisher import MetricsPublisher
from .rank_zero import info
from .results import Results
from .run_state import Found, RunObjects, checkpoint_state, find_checkpoint, restore_model, restore_state
from .seed import last_seeding, set_rng_state
from .signals import Preempted, SignalFlag
from .strategies import Strategy
from .tune import setup as tune_setup


class Trainer:
    """Trains a `surge.Module`: `Trainer(max_epochs=10).fit(model, train_loader, val_loader)`.

    Every argument is checked here, before any work; see `TrainerConfig` for what each accepts.
    """

    def __init__(
        self,
        *,
        max_epochs: int | None = None,
        min_epochs: int = 0,
        max_steps: int = -1,
        limit_train_batches: int | float = 1.0,
        limit_val_batches: int | float = 1.0,
        limit_test_batches: int | float = 1.0,
        limit_predict_batches: int | float = 1.0,
        val_check_interval: int | float = 1.0,
        check_val_every_n_epoch: int = 1,
        num_sanity_val_steps: int = 2,
        accumulate_grad_batches: int = 1,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str = "norm",
        precision: str | int | Precision = "32-true",
        accelerator: str = "auto",
        devices: int | str | list[int] = "auto",
        strategy: str | Strategy = "auto",
        num_nodes: int = 1,
        callbacks: list[Callback] | Callback | None = None,
        logger: bool | Logger | list[Logger] = True,
        default_root_dir: str | Path | None = None,
        enable_progress_bar: bool = True,
        enable_checkpointing: bool = True,
        enable_model_summary: bool = True,
        log_every_n_steps: int = 50,
        deterministic: bool | str | None = None,
        use_distributed_sampler: bool = True,
        benchmark: bool | None = None,
        matmul_precision: str | None = None,
        compile: bool | dict[str, Any] = False,
        channels_last: bool = False,
        on_nonfinite: str | None = "warn",
        effective_batch_size: int | None = None,
        scale_lr: str | None = None,
        reference_batch_size: int | None = None,
        num_workers: int | str | None = None,
        profiler: str | Profiler | None = None,
    ) -> None:
        args = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        doctor = requested_doctor_run()  # `surge doctor` runs this script: profile a short fit
        if doctor is not None:
            args = doctor.overrides(args)
        self._cfg = cfg = TrainerConfig(**{**args, "callbacks": callbacks or []})
        self._accelerator = resolve_accelerator(cfg.accelerator)
        self._devices = resolve_devices(self._accelerator, cfg.devices)
        env = detect()  # the one reading of the launch environment; the parts are given it
        self._strategy = build_strategy(cfg.strategy, cfg, self._accelerator, self._devices, env)
        self._precision: Precision = precision_plugin(cfg.precision, self._accelerator.name)
        self._strategy.connect_precision(self._precision)
        self.profiler: Profiler | None = build_profiler(cfg.profiler)
        self.loggers: list[Logger] = build_loggers(cfg.logger, cfg.default_root_dir)
        self.callbacks: list[Callback] = build_callbacks(cfg)
        self.fit_loop = FitLoop()
        self.should_stop = False
        self.sanity_checking = False
        self.state = "initializing"
        self.datamodule: DataModule | None = None
        self._publisher = MetricsPublisher(
            self.loggers, lambda: self.is_global_zero, lambda: self.current_epoch
        )
        self._module: Module | None = None
        self._parts: RunParts | None = None
        self._optim: Optimization | None = None
        self._validation: Validation | None = None
        self._plan = BatchPlan(0, [], 0)
        self._accumulate = cfg.accumulate_grad_batches  # a tuner may decide another
        self._train_results = Results("train", self._strategy.reducer)
        self._log_dir: Path | None = None
        self._compiled: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()  # compiled once each

    # -- assembly --------------------------------------------------------------------------
    def _setup(self, model: Module, stage: str) -> None:
        if not isinstance(model, Module):
            raise SurgeTypeError(f"model must be a surge.Module, got {type(model).__name__}")
        self.state = stage
        self._module = model
        model._trainer = self
        if self.datamodule is not None:
            self.datamodule.trainer = self
        device = self.root_device
        self._accelerator.setup_device(device)
        self._strategy.setup_environment(device)
        if self.world_size > 1 and self._log_dir is None:
            # Rank zero picks the run directory (version_N); every rank uses the same one.
            mine = str(self.log_dir) if self.is_global_zero else None
            shared = self._strategy.broadcast(mine)
            self._log_dir = Path(shared) if shared is not None else None
        if self._cfg.deterministic is not None:
            set_deterministic(self._cfg.deterministic)
        cfg = self._cfg
        speed.apply_backend_flags(cfg.benchmark, cfg.matmul_precision)
        model = self._precision.convert_module(model)
        self._strategy.setup_module(model)
        if cfg.channels_last:
            model.to(memory_format=torch.channels_last)
        if cfg.compile and stage == "fit" and model not in self._compiled:
            speed.compile_module(model, cfg.compile)
            self._compiled.add(model)  # remembered here: nothing is stamped on the user's model
        model._device = _first_param_device(model, self._strategy.device)
        speed.tensor_core_hint(model._device, self._precision)
        hooks = Hooks(self, model, [*self.callbacks, *(self.profiler.callbacks() if self.profiler else ())])
        self._hooks = hooks
        move = batch_mover(model, self._precision, cfg.channels_last)
        self._parts = RunParts(model, self._strategy, self._precision, hooks, move, self._publisher)

    # -- fit -------------------------------------------------------------------------------
    def fit(
        self,
        model: Module,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        datamodule: DataModule | None = None,
        ckpt_path: str | Path | None = None,
    ) -> None:
        """Train `model`; resume from `ckpt_path` (a path, "last", "best" or "auto") if given."""
        if self._cfg.logger is True:  # the default logger writes there: fail now, not at a log point
            writable_dir(self.default_root_dir, f"default_root_dir={str(self.default_root_dir)!r}")
        if isinstance(train_dataloaders, DataModule):
            datamodule, train_dataloaders = train_dataloaders, None
        self.datamodule = datamodule
        if datamodule is not None:
            datamodule.prepare_data()
            datamodule.setup("fit")
        self._check_hook(model, "training_step", "fit")
        train = self._loaders(train_dataloaders, "train_dataloader", model, "train_dataloaders")
        if not train:
            raise MisconfigurationError(
                "fit() has no training data: pass train_dataloaders=, a datamodule=, or define train_dataloader()."
            )
        if len(train) > 1:
            raise MisconfigurationError(f"train_dataloaders got {len(train)} loaders; pass one.")
        vals = self._loaders(val_dataloaders, "val_dataloader", model, "val_dataloaders")
        self._setup(model, "fit")
        cfg = self._cfg
        tuned = tune_setup.tune_loaders(self._tuning(), model, train[0], vals)
        self._accumulate = tuned.accumulate_grad_batches
        train_loader = self._prepare_loader(tuned.train, train=True)
        val_loaders = [self._prepare_loader(v) for v in tuned.vals]
        self._plan = plan_batches(
            train_loader, val_loaders, cfg.limit_train_batches, cfg.limit_val_batches, cfg.val_check_interval
        )
        resume = self._find_checkpoint(ckpt_path)
        optimizers, schedulers = parse_optimizers(model.configure_optimizers())
        if cfg.scale_lr is not None:
            tune_setup.scale_learning_rates(
                optimizers, schedulers, train_loader, self._accumulate * self.world_size, cfg
            )
        self._optim = self._optimization(optimizers, schedulers)
        self._validation = Validation(
            lambda loaders, limits, sanity: run_evaluation(
                self._parts, "validate", loaders, limits, self.global_step, sanity
            ),
            val_loaders,
            self._plan,
            cfg.check_val_every_n_epoch,
            has_step=type(model).validation_step is not Module.validation_step,
        )
        self.fit_loop.bind(self._fit_context(), train_loader)
        if tuned.auto_workers is not None:
            self.fit_loop.auto_workers = tuned.auto_workers(
                train_loader, val_loaders, prepare=self._adjust_loader
            )
        pending_rng = restore_state(self._run_objects(), resume) if resume is not None else None
        self._run_stage(
            "fit", lambda: self._fit_body(pending_rng), lambda: [self.train_dataloader, *self.val_dataloaders]
        )

    def _tuning(self) -> tune_setup.Tuning:
        cfg = self._cfg
        processes = max(1, len(self._devices)) if self.world_size > 1 else 1
        return tune_setup.Tuning(
            effective_batch_size=cfg.effective_batch_size,
            num_workers=cfg.num_workers,
            accumulate_grad_batches=cfg.accumulate_grad_batches,
            fit_batches=lambda loader: tune_setup.fit_batches(loader, cfg, self.world_size),
            strategy=self._strategy,
            cuda=self._accelerator.name == "cuda",
            processes_per_node=processes,
            trainer=self,
        )

    def _optimization(self, optimizers: list[Any], schedulers: list[Any]) -> Optimization:
        cfg = self._cfg
        has_scaler = getattr(self._precision, "scaler", None) is not None
        return Optimization(
            optimizers,
            schedulers,
            self._precision,
            self._hooks,
            cfg.gradient_clip_val,
            cfg.gradient_clip_algorithm,
            lambda: self.callback_metrics,
            guard=NonFiniteGuard(cfg.on_nonfinite, optimizers, has_scaler),
            where=lambda: (self.global_step + 1, self.current_epoch, self.fit_loop.batches_done),
        )

    def _fit_context(self) -> FitContext:
        cfg = self._cfg
        settings = FitSettings(
            accumulate_grad_batches=self._accumulate,
            max_epochs=cfg.max_epochs,
            min_epochs=cfg.min_epochs,
            max_steps=cfg.max_steps,
            log_every_n_steps=cfg.log_every_n_steps,
            batches_per_epoch=self._plan.train,
        )
        signals = SignalFlag(forward_to=getattr(self._strategy, "launcher", None))
        return FitContext(
            self._parts, settings, self._optim, self._train_results, self._validation, signals, self.profiler
        )

    def _adjust_loader(self, loader: Any) -> Any:
        seeding = last_seeding()  # what seed_everything set, if it ran: worker seeds, sampler seed
        return prepare_loader(loader, self._accelerator.pin_memory, bool(seeding and seeding.workers))

    def _prepare_loader(self, loader: Iterable, train: bool = False) -> Iterable:
        loader = self._adjust_loader(loader)
        if self.world_size == 1 or not self._cfg.use_distributed_sampler:
            return loader
        if train:
            seeding = last_seeding()
            seed = seeding.seed if seeding else 0
            return data_mod.distribute_train_loader(loader, self.global_rank, self.world_size, seed)
        return data_mod.distribute_eval_loader(loader, self.global_rank, self.world_size)

    def _fit_body(self, pending_rng: dict[str, Any] | None) -> None:
        signals = self.fit_loop.ctx.signals
        signals.install()
        try:
            self._fit_stages(pending_rng)
        finally:
            signals.restore()

    def _fit_stages(self, pending_rng: dict[str, Any] | None) -> None:
        hooks = self._hooks
        hooks.callbacks("setup", "fit")
        hooks.call("on_fit_start")
        if self.loggers and self.is_global_zero:
            example = getattr(self._module, "example_input_array", None)
            for lg in self.loggers:
                if self._module.hparams:
                    lg.log_hyperparams(self._module.hparams)
                if getattr(lg, "log_graph", False) and example is not None:
                    lg.log_module_graph(self._module, data_mod.move_to_device(example, self._module.device))
        self._sanity_check()
        if pending_rng is not None:
            set_rng_state(pending_rng)  # the resumed run draws exactly what the uninterrupted one would
        self._module.train()
        hooks.call("on_train_start")
        if self.profiler is not None:
            self.profiler.setup(self)
        self.fit_loop.run()
        if self.profiler is not None:
            self.profiler.finish(self)
        skipped = self._precision.skipped_steps
        if skipped:
            info(
                f"{self._precision.name}: {skipped} optimizer steps were skipped for inf/NaN gradients "
                f"(the loss scale backed off; the weights were not touched)."
            )
        hooks.call("on_train_end")
        hooks.call("on_fit_end")
        hooks.callbacks("teardown", "fit")

    def _run_stage(self, stage: str, body: Any, loaders: Any = ()) -> Any:
        status = "success"
        try:
            return body()
        except BaseException as err:
            status = "interrupted" if isinstance(err, KeyboardInterrupt | Preempted) else "failed"
            self._hooks.callbacks("on_exception", err)
            self._strategy.explain_failure(err)
            self._strategy.teardown(failed=not isinstance(err, Preempted))
            raise
        finally:
            for lg in self.loggers if self.is_global_zero else ():
                lg.finalize(status)
            self.state = "finished" if status == "success" else status
            if self._module is not None:
                self._module._results = None
            data_mod.stop_persistent_workers(loaders() if callable(loaders) else loaders)

    def _sanity_check(self) -> None:
        limits = self._validation.sanity_limits(self._cfg.num_sanity_val_steps)
        if not limits:
            return
        self.sanity_checking = True
        self._hooks.callbacks("on_sanity_check_start")
        try:
            self._validation.run(limits, sanity=True)
        finally:
            self.sanity_checking = False
        self._hooks.callbacks("on_sanity_check_end")

    # -- evaluate and predict --------------------------------------------------------------
    def validate(
        self,
        model: Module | None = None,
        dataloaders: Any = None,
        ckpt_path: str | Path | None = None,
        datamodule: DataModule | None = None,
    ) -> list[dict[str, float]]:
        """Run `validation_step` over the data; one dict of metrics per dataloader."""
        return self._evaluate("validate", model, dataloaders, ckpt_path, datamodule)

    def test(
        self,
        model: Module | None = None,
        dataloaders: Any = None,
        ckpt_path: str | Path | None = None,
        datamodule: DataModule | None = None,
    ) -> list[dict[str, float]]:
        """Run `test_step` over the data; one dict of metrics per dataloader."""
        return self._evaluate("test", model, dataloaders, ckpt_path, datamodule)

    def predict(
        self,
        model: Module | None = None,
        dataloaders: Any = None,
        ckpt_path: str | Path | None = None,
        datamodule: DataModule | None = None,
    ) -> list[Any]:
        """Run `predict_step` over the data and return the predictions."""
        model, loaders = self._eval_setup("predict", model, dataloaders, ckpt_path, datamodule)
        limits = [
            data_mod.limit_batches(v, self._cfg.limit_predict_batches, "limit_predict_batches")
            for v in loaders
        ]
        return self._run_stage("predict", lambda: run_prediction(self._parts, loaders, limits), loaders)

    def _evaluate(
        self, stage: str, model: Module | None, dataloaders: Any, ckpt_path: Any, datamodule: Any
    ) -> list[dict[str, float]]:
        model, loaders = self._eval_setup(stage, model, dataloaders, ckpt_path, datamodule)
        self._check_hook(model, "validation_step" if stage == "validate" else "test_step", stage)
        limit = self._cfg.limit_val_batches if stage == "validate" else self._cfg.limit_test_batches
        arg = "limit_val_batches" if stage == "validate" else "limit_test_batches"
        limits = [data_mod.limit_batches(v, limit, arg) for v in loaders]
        step = self.global_step
        return self._run_stage(
            stage, lambda: run_evaluation(self._parts, stage, loaders, limits, step), loaders
        )

    def _eval_setup(
        self, stage: str, model: Module | None, dataloaders: Any, ckpt_path: Any, datamodule: Any
    ) -> tuple[Module, list]:
        model = model if model is not None else self._module
        if model is None:
            raise MisconfigurationError(
                f"{stage}() needs a model: pass model= (no fit() ran on this Trainer)."
            )
        if isinstance(dataloaders, DataModule):
            datamodule, dataloaders = dataloaders, None
        if datamodule is not None:
            self.datamodule = datamodule
            datamodule.prepare_data()
            datamodule.setup(stage)
        hook = {"validate": "val_dataloader", "test": "test_dataloader", "predict": "predict_dataloader"}[
            stage
        ]
        loaders = self._loaders(dataloaders, hook, model, "dataloaders")
        if not loaders:
            raise MisconfigurationError(
                f"{stage}() has no data: pass dataloaders=, a datamodule=, or define {hook}()."
            )
        self._setup(model, stage)
        loaders = [self._prepare_loader(v) for v in loaders]
        found = self._find_checkpoint(ckpt_path)
        if ckpt_path == "auto" and found is None:
            info(
                f'{stage}(ckpt_path="auto"): no checkpoint under {self.default_root_dir}; using the current weights'
            )
        if found is not None:
            restore_model(self._strategy, model, found.state, found.path)
        return model, loaders

    def _loaders(self, given: Any, hook: str, model: Module, arg: str) -> list[Iterable]:
        if given is not None:
            return data_mod.as_loader_list(given, arg)
        for source in (self.datamodule, model):
            fn = getattr(source, hook, None) if source is not None else None
            if fn is None:
                continue
            try:
                return data_mod.as_loader_list(fn(), f"{type(source).__name__}.{hook}()")
            except NotImplementedError:
                continue
        return []

    @staticmethod
    def _check_hook(model: Any, hook: str, stage: str) -> None:
        if not isinstance(model, Module):
            raise SurgeTypeError(f"model must be a surge.Module, got {type(model).__name__}")
        if hook != "training_step" and getattr(type(model), hook) is getattr(Module, hook):
            raise MisconfigurationError(
                f"{stage}() needs {type(model).__name__}.{hook}(batch, batch_idx) to be defined."
            )
        if hook == "training_step" and type(model).training_step is Module.training_step:
            raise MisconfigurationError(
                f"fit() needs {type(model).__name__}.training_step(batch, batch_idx) to be defined."
            )

    # -- checkpoints -----------------------------------------------------------------------
    def save_checkpoint(self, filepath: str | Path, weights_only: bool = False) -> None:
        """Write the whole training state (or just the weights) to `filepath`, atomically."""
        if self._module is None:
            raise MisconfigurationError("save_checkpoint() needs a model: call fit() first.")
        self._strategy.save_checkpoint(checkpoint_state(self._run_objects(), weights_only), filepath)

    def _run_objects(self) -> RunObjects:
        validation = self._validation
        return RunObjects(
            module=self._module,
            strategy=self._strategy,
            precision=self._precision,
            hooks=self._hooks,
            loop=self.fit_loop,
            optim=self._optim,
            results=self._train_results,
            callbacks=self.callbacks,
            datamodule=self.datamodule,
            accumulate_grad_batches=self._accumulate,
            batches_per_epoch=self._plan.train,
            training_rng=validation.training_rng if validation is not None else None,
        )

    def _find_checkpoint(self, ckpt_path: str | Path | None) -> Found | None:
        if ckpt_path is None:
            return None
        return find_checkpoint(
            ckpt_path, self._strategy.load_checkpoint, self.default_root_dir, self.checkpoint_callback
        )

    def export(self, path: str | Path) -> Path:
        """Write the model's bare weights to a `.safetensors` file (see `surge.export_safetensors`)."""
        if self._module is None:
            raise MisconfigurationError("export() needs a model: call fit() first.")
        from .export import export_safetensors

        return export_safetensors(self._module, path) if self.is_global_zero else Path(path)

    # -- properties ------------------------------------------------------------------------
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
        return self.fit_loop.epoch

    @property
    def max_epochs(self) -> int:
        return self._cfg.max_epochs

    @property
    def max_steps(self) -> int:
        return self._cfg.max_steps

    @property
    def accumulate_grad_batches(self) -> int:
        """The accumulation in use (`effective_batch_size=` decides it)."""
        return self._accumulate

    @property
    def log_every_n_steps(self) -> int:
        return self._cfg.log_every_n_steps

    @property
    def enable_validation(self) -> bool:
        """Whether this fit validates (a validation_step, val data, and batches to run)."""
        return self._validation is not None and self._validation.enabled

    @property
    def train_dataloader(self) -> Any:
        return self.fit_loop.train_loader

    @property
    def val_dataloaders(self) -> list[Any]:
        return self._validation.loaders if self._validation is not None else []

    @property
    def num_training_batches(self) -> int | float:
        return self._plan.train

    @property
    def num_val_batches(self) -> list[int | float]:
        return self._plan.val

    @property
    def callback_metrics(self) -> dict[str, torch.Tensor]:
        return self._publisher.callback_metrics

    @property
    def logged_metrics(self) -> dict[str, torch.Tensor]:
        return self._publisher.logged_metrics

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        return self._publisher.progress_bar_metrics

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Publish values a callback computed on the host: to `callback_metrics`, `logged_metrics`
        and the loggers (rank zero), at `step` (default: the current global step)."""
        flags = {k: (False, True, k) for k in metrics}
        self._publisher.publish(metrics, flags, step=self.global_step if step is None else step)

    def read_progress_bar_metrics(self) -> dict[str, float]:
        """The current training step's `prog_bar=True` values, read from the device now (a host
        read: call it at refresh points, not every step), with the last published ones."""
        shown = dict(self._train_results.read_step(only_prog_bar=True))
        shown.update({k: v for k, v in self.progress_bar_metrics.items() if k not in shown})
        return shown

    @property
    def training_rng(self) -> dict[str, Any] | None:
        """Training's RNG state while validation runs inside fit (what a checkpoint then records)."""
        return self._validation.training_rng if self._validation is not None else None

    @property
    def root_device(self) -> torch.device:
        """The device this process trains on."""
        local = self.local_rank
        return self._accelerator.device(self._devices[local] if local < len(self._devices) else local)

    @property
    def _train_loader(self) -> Any:
        return self.fit_loop.train_loader

    @property
    def default_root_dir(self) -> Path:
        return self._cfg.default_root_dir

    @property
    def logger(self) -> Logger | None:
        return self.loggers[0] if self.loggers else None

    @property
    def log_dir(self) -> Path:
        """The run directory: the first logger's, else `default_root_dir` (the same on every rank)."""
        if self._log_dir is not None:
            return self._log_dir
        for lg in self.loggers:
            if lg.log_dir is not None:
                return Path(lg.log_dir)
        return Path(self._cfg.default_root_dir)

    @property
    def checkpoint_callbacks(self) -> list[Any]:
        from .callbacks.checkpoint import ModelCheckpoint

        return [cb for cb in self.callbacks if isinstance(cb, ModelCheckpoint)]

    @property
    def checkpoint_callback(self) -> Any:
        cbs = self.checkpoint_callbacks
        return cbs[0] if cbs else None

    @property
    def early_stopping_callback(self) -> Any:
        from .callbacks.early_stopping import EarlyStopping

        return next((cb for cb in self.callbacks if isinstance(cb, EarlyStopping)), None)

    @property
    def progress_bar_callback(self) -> Any:
        from .callbacks.progress import ProgressBar

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

    @property
    def training(self) -> bool:
        return self.state == "fit" and not self.sanity_checking

    @property
    def estimated_stepping_batches(self) -> int | float:
        """Optimizer steps this fit will take (for schedulers such as OneCycleLR)."""
        per_epoch = math.ceil(self.num_training_batches / self._accumulate)
        epochs = self._cfg.max_epochs if self._cfg.max_epochs >= 0 else math.inf
        total = per_epoch * epochs
        return min(total, self._cfg.max_steps) if self._cfg.max_steps >= 0 else total


def _first_param_device(module: torch.nn.Module, default: torch.device) -> torch.device:
    for p in module.parameters():
        return p.device
    return default
