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
from .loops.evaluate import run_evaluation, run_prediction
from .loops.fit import FitLoop
from .loops.hooks import Hooks
from .module import Module
from .nonfinite import NonFiniteGuard
from .optim import Optimization, parse_optimizers
from .paths import writable_dir
from .precision import Precision, precision_plugin
from .profiler import Profiler, build_profiler
from .profiler.doctor import requested as requested_doctor_run
from .rank_zero import info, warn
from .results import Results
from .run_state import checkpoint_state, find_checkpoint, restore_state
from .seed import last_seeding, rng_untouched, set_rng_state
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
        precision: str | int = "32-true",
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
        self.fit_loop = FitLoop(self)
        self.should_stop = False
        self.callback_metrics: dict[str, torch.Tensor] = {}
        self.logged_metrics: dict[str, torch.Tensor] = {}
        self.progress_bar_metrics: dict[str, float] = {}
        self.sanity_checking = False
        self.training_rng: dict[str, Any] | None = None  # set while validation runs inside fit
        self.state = "initializing"
        self.datamodule: DataModule | None = None
        self._module: Module | None = None
        self._optim: Optimization | None = None
        self._train_loader: Iterable | None = None
        self._val_loaders: list[Iterable] = []
        self.num_training_batches: int | float = 0
        self.num_val_batches: list[int | float] = []
        self._val_every_n_batches = 0
        self._batch_mover: Any = None
        self._train_results = Results("train", self._strategy.reducer)
        self._log_dir: Path | None = None
        self._signals = SignalFlag()
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
        local = self._strategy.local_rank
        index = self._devices[local] if local < len(self._devices) else local
        device = self._accelerator.device(index)
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
        speed.tensor_core_hint(model._device, self._precision.name)
        self._batch_mover = batch_mover(model, self._precision, cfg.channels_last)
        self._hooks = Hooks(self, model, self.callbacks)

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
        if cfg.effective_batch_size is not None or cfg.num_workers is not None:
            train[0], vals = tune_setup.tune_loaders(self, model, train[0], vals)
        self._train_loader = self._prepare_loader(train[0], train=True)
        self._val_loaders = [self._prepare_loader(v) for v in vals]
        self._plan_batches()
        resume = find_checkpoint(self, ckpt_path) if ckpt_path is not None else None
        optimizers, schedulers = parse_optimizers(model.configure_optimizers())
        if cfg.scale_lr is not None:
            tune_setup.scale_learning_rates(self, optimizers, schedulers)
        self._optim = Optimization(
            optimizers,
            schedulers,
            self._precision,
            self._hooks,
            cfg.gradient_clip_val,
            cfg.gradient_clip_algorithm,
            lambda: self.callback_metrics,
            guard=NonFiniteGuard(
                self._cfg.on_nonfinite, optimizers, getattr(self._precision, "scaler", None) is not None
            ),
            where=lambda: (self.global_step + 1, self.current_epoch, self.fit_loop.batches_done),
        )
        pending_rng = restore_state(self, resume) if resume is not None else None
        self._run_stage("fit", lambda: self._fit_body(pending_rng), [self._train_loader, *self._val_loaders])

    def _prepare_loader(self, loader: Iterable, train: bool = False) -> Iterable:
        seeding = last_seeding()  # what seed_everything set, if it ran: worker seeds, sampler seed
        loader = prepare_loader(loader, self._accelerator.pin_memory, bool(seeding and seeding.workers))
        if self.world_size == 1 or not self._cfg.use_distributed_sampler:
            return loader
        if train:
            seed = seeding.seed if seeding else 0
            return data_mod.distribute_train_loader(loader, self.global_rank, self.world_size, seed)
        return data_mod.distribute_eval_loader(loader, self.global_rank, self.world_size)

    def _fit_body(self, pending_rng: dict[str, Any] | None) -> None:
        self._signals = SignalFlag(forward_to=getattr(self._strategy, "launcher", None))
        self._signals.install()
        try:
            self._fit_stages(pending_rng)
        finally:
            self._signals.restore()

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

    def _run_stage(self, stage: str, body: Any, loaders: Iterable[Any] = ()) -> Any:
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
            data_mod.stop_persistent_workers(loaders)

    def _plan_batches(self) -> None:
        cfg = self._cfg
        length = data_mod.loader_length(self._train_loader)
        if length == 0:
            raise MisconfigurationError(
                "the train dataloader is empty (0 batches): check the dataset and batch_size."
            )
        self.num_training_batches = data_mod.limit_batches(
            self._train_loader, cfg.limit_train_batches, "limit_train_batches"
        )
        self.num_val_batches = [
            data_mod.limit_batches(v, cfg.limit_val_batches, "limit_val_batches") for v in self._val_loaders
        ]
        n, interval = self.num_training_batches, cfg.val_check_interval
        if isinstance(interval, float):
            if interval < 1.0 and n == math.inf:
                raise MisconfigurationError(
                    f"val_check_interval={interval} is a fraction, but the train dataloader has no length; use an int."
                )
            self._val_every_n_batches = 0 if interval == 1.0 else max(1, int(n * interval))
        else:
            if interval > n:
                raise MisconfigurationError(
                    f"val_check_interval={interval} is more than the {n} training batches per epoch; use <= {n} or a fraction."
                )
            self._val_every_n_batches = interval

    def _sanity_check(self) -> None:
        steps = self._cfg.num_sanity_val_steps
        if steps == 0 or not self._val_enabled():
            return
        limits = [n if steps == -1 else min(n, steps) for n in self.num_val_batches]
        self.sanity_checking = True
        self._hooks.callbacks("on_sanity_check_start")
        try:
            self._validate_rng_neutral(limits, sanity=True)
        finally:
            self.sanity_checking = False
        self._hooks.callbacks("on_sanity_check_end")

    def _val_enabled(self) -> bool:
        overridden = type(self._module).validation_step is not Module.validation_step
        return overridden and bool(self._val_loaders) and sum(self.num_val_batches) > 0

    def _should_validate(self, epoch: int, end_of_epoch: bool) -> bool:
        return self._val_enabled() and (epoch + 1) % self._cfg.check_val_every_n_epoch == 0

    def _run_validation(self) -> None:
        # Validation never moves training's random streams: training is the same whether and how
        # often it validates, and a checkpoint written around a validation resumes exactly.
        self._validate_rng_neutral(self.num_val_batches)

    def _validate_rng_neutral(self, limits: list[int | float], sanity: bool = False) -> None:
        with rng_untouched() as training_rng:
            self.training_rng = training_rng  # what a checkpoint written during validation records
            try:
                run_evaluation(self, "validate", self._val_loaders, limits, sanity=sanity)
            finally:
                self.training_rng = None

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
        return self._run_stage("predict", lambda: run_prediction(self, loaders, limits), loaders)

    def _evaluate(
        self, stage: str, model: Module | None, dataloaders: Any, ckpt_path: Any, datamodule: Any
    ) -> list[dict[str, float]]:
        model, loaders = self._eval_setup(stage, model, dataloaders, ckpt_path, datamodule)
        self._check_hook(model, "validation_step" if stage == "validate" else "test_step", stage)
        limit = self._cfg.limit_val_batches if stage == "validate" else self._cfg.limit_test_batches
        arg = "limit_val_batches" if stage == "validate" else "limit_test_batches"
        limits = [data_mod.limit_batches(v, limit, arg) for v in loaders]
        return self._run_stage(stage, lambda: run_evaluation(self, stage, loaders, limits), loaders)

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
        path = find_checkpoint(self, ckpt_path) if ckpt_path is not None else None
        if ckpt_path == "auto" and path is None:
            info(
                f'{stage}(ckpt_path="auto"): no checkpoint under {self.default_root_dir}; using the current weights'
            )
        if path is not None:
            ckpt = self._strategy.load_checkpoint(path)
            problems = self._strategy.restore_model(model, ckpt, path, strict=model.strict_loading)
            if problems:
                warn(f"{path}: strict_loading=False, loaded the weights that match; " + "; ".join(problems))
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

    # -- metrics ---------------------------------------------------------------------------
    def _publish(
        self,
        metrics: Mapping[str, float],
        flags: Mapping[str, tuple[bool, bool, str]],
        step: int,
        evaluation: bool = False,
        to_loggers: bool = True,
    ) -> None:
        """Make host metrics visible: callback_metrics, the progress bar, and the loggers."""
        if not evaluation and self._optim is not None and self._optim.guard.device_skip:
            self._optim.guard.report(step)  # a fused optimizer skipped on the device: say so promptly
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
            if self.loggers and self.is_global_zero:
                row = {**logged, "epoch": self.current_epoch}
                for lg in self.loggers:
                    lg.log_metrics(row, step)

    def _loggers_save(self) -> None:
        if self.is_global_zero:
            for lg in self.loggers:
                lg.save()

    # -- checkpoints -----------------------------------------------------------------------
    def save_checkpoint(self, filepath: str | Path, weights_only: bool = False) -> None:
        """Write the whole training state (or just the weights) to `filepath`, atomically."""
        if self._module is None:
            raise MisconfigurationError("save_checkpoint() needs a model: call fit() first.")
        self._strategy.save_checkpoint(checkpoint_state(self, weights_only), filepath)

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
        return self._cfg.accumulate_grad_batches

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
        per_epoch = math.ceil(self.num_training_batches / self._cfg.accumulate_grad_batches)
        epochs = self._cfg.max_epochs if self._cfg.max_epochs >= 0 else math.inf
        total = per_epoch * epochs
        return min(total, self._cfg.max_steps) if self._cfg.max_steps >= 0 else total


def _first_param_device(module: torch.nn.Module, default: torch.device) -> torch.device:
    for p in module.parameters():
        return p.device
    return default
