"""`surge.Trainer`: validates its arguments, assembles the parts, and runs the loops."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from .. import data as data_mod
from ..accelerators import resolve_accelerator, resolve_devices
from ..arguments import TrainerConfig
from ..arguments.barebones import STARTED, announcement, barebones_arguments
from ..arguments.declared import takes_arguments_of
from ..arguments.lightning import requeue_of
from ..assembly import (
    anomaly_mode,
    batch_mover,
    build_callbacks,
    build_loggers,
    build_optimization,
    build_strategy,
    fit_settings,
    prepare_module,
)
from ..callbacks.base import Callback
from ..config.semantics import Semantics
from ..data.limit_messages import say_explicit_limits
from ..datamodule import DataModule
from ..errors import MisconfigurationError, SurgeTypeError
from ..launch.environment import detect
from ..launch.signals import Preempted, SignalFlag
from ..loggers.base import Logger
from ..loops.context import FitContext, RunParts
from ..loops.control import SanityFlag, StopRequest
from ..loops.evaluate import run_evaluation
from ..loops.fit import FitLoop
from ..loops.fit_data import FitData
from ..loops.fit_data import tuning as tune_setup
from ..loops.hooks import Hooks
from ..loops.predict_state import PredictLoop
from ..loops.rollback import Rollback
from ..loops.stage_data import LoaderPreparation, check_step_defined, eval_loaders
from ..loops.stage_exit import StageExit
from ..loops.stage_hooks import enter_stage, leave_stage
from ..loops.validation import Validation
from ..metrics.publisher import MetricsPublisher
from ..metrics.results import Results
from ..module import Module
from ..optim import Optimization, configured_optimizers
from ..precision import Precision, precision_plugin
from ..profiler import Profiler, build_profiler
from ..profiler.doctor_run import requested as requested_doctor_run
from ..profiler.goodput_watch import GoodputLedger, GoodputWatch
from ..rank_zero import info
from ..seed import set_rng_state
from ..speed.compile_cache import CompileCache
from ..speed.compiled_calls import CompiledCalls
from ..speed.compiling import compile_watch, compiled_training_step
from ..speed.cpu_threads import check_cpu_threads
from .run_state import (
    Found,
    RunObjects,
    checkpoint_state,
    find_checkpoint,
    restore_model,
    restore_modules,
    restore_training,
)
from .stages import StageEntryPoints


class Trainer(StageEntryPoints):
    """Trains a `surge.Module`: `Trainer(max_epochs=10).fit(model, train_loader, val_loader)`.

    Every argument is keyword-only and checked here, before any work. Each is declared once, as a
    field of `TrainerConfig` (arguments/__init__.py); the meanings below come from config/meanings.py
    (`python docs/trainer_arguments.py` writes them here and in docs/trainer.md).

    Training length:

    - `max_epochs: int | None = None`: Stop after this many epochs (-1: no limit). None: 1000, or no
      limit when `max_steps` or `max_time` is set.
    - `min_epochs: int | None = None`: Train at least this many epochs, even if early stopping asks
      to stop. None: 0, or 1 with `min_steps`.
    - `max_steps: int = -1`: Stop after this many optimizer steps. -1: no limit.
    - `min_steps: int | None = None`: Train at least this many optimizer steps before early stopping
      may stop the fit.
    - `max_time: str | dict[str, float] | timedelta | None = None`: Stop at the first step after
      this much training time: "DD:HH:MM:SS", a dict such as {"hours": 2}, or a timedelta.
    - `limit_train_batches: int | float | None = None`: Batches per training epoch: a count (int) or
      a fraction (float). None: all.

    Validation, test and predict:

    - `val_check_interval: int | float | None = None`: Validate inside an epoch: after this fraction
      of it (float) or every n batches (int). None: at each epoch's end.
    - `check_val_every_n_epoch: int | None = 1`: Validate every n epochs. None: count
      `val_check_interval` batches across epochs.
    - `num_sanity_val_steps: int | None = 2`: Validation batches run before training, to catch bugs
      early. -1: all.
    - `limit_val_batches: int | float | None = None`: Validation batches: a count (int) or a
      fraction (float). None: all.
    - `limit_test_batches: int | float | None = None`: Test batches: a count (int) or a fraction
      (float). None: all.
    - `limit_predict_batches: int | float | None = None`: Predict batches: a count (int) or a
      fraction (float). None: all.
    - `inference_mode: bool = True`: Validate and test under `torch.inference_mode()`. False: under
      `torch.no_grad()`.

    Optimization:

    - `accumulate_grad_batches: int = 1`: Batches whose gradients add up before each optimizer step.
    - `gradient_clip_val: float | None = None`: Clip the gradients at this value, after fp16
      unscaling. None: no clipping.
    - `gradient_clip_algorithm: str | None = None`: "norm" clips the total norm, "value" each
      element. None: "norm" (hooks see None, as in Lightning).
    - `effective_batch_size: int | None = None`: Samples per optimizer step. surge picks the
      micro-batch and the accumulation that reach it.
    - `scale_lr: str | None = None`: Scale the learning rates with the effective batch: "linear" or
      "sqrt". Needs `reference_batch_size`.
    - `reference_batch_size: int | None = None`: The batch size your learning rates were tuned for
      (with `scale_lr`).
    - `on_nonfinite: str | None = 'warn'`: What a NaN or inf loss does: "warn" (no per-step sync),
      "raise", "skip" the step, or "rollback" to the last good state. None: no check.

    Precision and devices:

    - `precision: str | int | Precision | None = '32-true'`: "32-true", "16-mixed", "bf16-mixed",
      "bf16-true", "64-true", ... or a Precision object. See docs/precision.md.
    - `accelerator: str | Accelerator = 'auto'`: "cpu", "cuda" (or "gpu"), "mps", or an Accelerator
      object. "auto": the best one present.
    - `devices: int | str | list[int] = 'auto'`: How many devices (int), which ones (a list, or
      "0,2"), or "auto". On the CPU, n processes.
    - `strategy: str | Strategy = 'auto'`: "ddp", "fsdp", "dp", ... or a Strategy object. "auto":
      one device, or DDP on several. See docs/distributed.md.
    - `num_nodes: int = 1`: Machines in the run; each runs `devices` processes.
    - `sync_batchnorm: bool = False`: Turn BatchNorm layers into SyncBatchNorm before the model is
      wrapped (CUDA only).
    - `plugins: Any = None`: A plugin or a list: a cluster environment, checkpoint writer, precision
      or requeue policy.

    Data:

    - `num_workers: int | str | None = None`: Loader worker processes: an int, or "auto" to measure
      and pick during the fit. None: each loader's own.
    - `use_distributed_sampler: bool = True`: With several processes, each reads its own share of
      the data (a DistributedSampler).
    - `reload_dataloaders_every_n_epochs: int = 0`: Ask the module or datamodule for new loaders
      every n epochs. 0: never.

    Logging and progress:

    - `logger: bool | Logger | list[Logger] | None = True`: True: TensorBoard (when installed) and
      CSV, in one run directory. False: none. Or Logger objects.
    - `log_every_n_steps: int | None = 50`: Send step metrics to the loggers every n steps (0:
      never; each send reads the device).
    - `enable_progress_bar: bool | None = True`: Show the progress bar.
    - `enable_model_summary: bool | None = True`: Print the model summary when the fit starts.
    - `barebones: bool = False`: Turn off what costs speed (checkpoints, loggers, progress bar,
      summary, sanity check, self.log), as Lightning.
    - `enable_autolog_hparams: bool = True`: Log the module's and datamodule's hyper-parameters to
      the loggers.
    - `profiler: str | Profiler | None = None`: "simple", "advanced", "pytorch", or a Profiler
      object: where the time goes. See docs/doctor.md.
    - `goodput_report: str | None = None`: At the fit's end: "line" (one line), "table", or "off".
      None: "line" ("off" under `surge run`).

    Checkpoints, callbacks and the run directory:

    - `default_root_dir: str | Path | None = None`: Where `surge_logs/version_N/` is written. None:
      the current directory.
    - `enable_checkpointing: bool | None = True`: Add a ModelCheckpoint callback when `callbacks`
      has none.
    - `async_checkpoint: bool = False`: Write checkpoints on a background thread while training goes
      on.
    - `callbacks: list[Callback] | Callback | None = None`: A callback or a list: ModelCheckpoint,
      EarlyStopping, LearningRateMonitor, ...

    Speed and memory:

    - `compile: bool | str | dict[str, Any] = False`: torch.compile: True (the forward), "step"
      (training and optimizer step), "regions" (repeated blocks), or a dict.
    - `benchmark: bool | None = None`: Set `torch.backends.cudnn.benchmark`. None: leave it as it
      is.
    - `matmul_precision: str | None = None`: `torch.set_float32_matmul_precision`: "highest", "high"
      (TF32) or "medium". None: leave it.
    - `channels_last: bool = False`: Use the channels-last memory format for the model and image
      batches.
    - `activation_checkpointing: CheckpointPolicy | None = None`: Module classes (or a policy) whose
      activations are recomputed in backward, to save memory.

    Debugging and reproducibility:

    - `fast_dev_run: int | bool = False`: Run n batches (True: 1) of each stage to test the code. No
      loggers, no checkpoints.
    - `overfit_batches: int | float = 0.0`: Train and validate on the same few batches (int or
      fraction), in order.
    - `detect_anomaly: bool = False`: Find the operation that made a NaN in backward
      (`torch.autograd.detect_anomaly`). Slow.
    - `deterministic: bool | str | None = None`: True: deterministic algorithms only. "warn": warn
      on others instead. None: torch's setting.

    Lightning arguments surge refuses:

    - `model_registry: str | None = None`: Lightning's model upload. Refused unless None: use
      `trainer.export(path)`.
    """

    @takes_arguments_of(TrainerConfig)
    def __init__(self, **args: Any) -> None:
        doctor = requested_doctor_run()  # `surge doctor` runs this script: profile a short fit
        if doctor is not None:
            args = doctor.overrides(args)
        say_explicit_limits(args)
        self._semantics = sem = Semantics.current()  # the one reading of the mode; handed to the parts
        self._cfg = cfg = TrainerConfig(**barebones_arguments(args))
        if cfg.barebones:
            info(announcement())
        self._requeue = requeue_of(cfg.plugins, sem)  # which signal checkpoints, and where
        self._accelerator = resolve_accelerator(cfg.accelerator)
        self._devices = resolve_devices(self._accelerator, cfg.devices)
        env = cfg.plugins.environment or detect()  # the one reading of where ranks come from
        self._strategy = build_strategy(cfg.strategy, cfg, self._accelerator, self._devices, env)
        self._precision: Precision = precision_plugin(cfg.precision, self._accelerator.name, sem)
        self._strategy.connect_precision(self._precision)
        self._strategy.connect_semantics(sem)
        self.profiler: Profiler | None = build_profiler(cfg.profiler)
        self.loggers: list[Logger] = build_loggers(cfg.logger, Path(self.default_root_dir), sem)
        self.callbacks: list[Callback] = build_callbacks(cfg)
        self.fit_loop, self.predict_loop = FitLoop(), PredictLoop()
        self._stop, self._sanity = StopRequest(), SanityFlag()  # `should_stop`, `sanity_checking`
        self.datamodule: DataModule | None = None
        self._publisher = MetricsPublisher(
            self.loggers,
            partial(getattr, self, "is_global_zero"),
            partial(getattr, self, "current_epoch"),
            sem,
        )
        self._module: Module | None = None  # the parts below exist once a stage has set up
        self._parts: RunParts | None = None
        self._optim: Optimization | None = None
        self._validation: Validation | None = None
        self._fit_data: FitData | None = None  # fit's loaders, plan and accumulation: their one owner
        self._stage_loaders: dict[str, Any] = {}  # validate/test/predict's: (as given, batch limits)
        self._train_results = Results(
            "train", self._strategy.reducer, sem.epoch_reduces_unsynced, sem.uncalled_metric_step
        )
        self._log_dir: str | None = None
        self._compiled: weakref.WeakKeyDictionary[Module, CompiledCalls | None] = weakref.WeakKeyDictionary()
        self._goodput = GoodputLedger()  # where a fit's wall time goes (`trainer.goodput`)
        self._compile_cache = CompileCache(cfg.compile)  # compiled artifacts beside the checkpoints

    # -- assembly --------------------------------------------------------------------------
    def _connect(self, ckpt_path: str | Path | None = None) -> Found | None:
        """Before a stage's hooks (as Lightning): the device, the process group, the checkpoint to
        resume (read before the run directory is chosen: a resume continues its loggers' runs),
        one run directory."""
        self._accelerator.setup_device(self.root_device)
        self._strategy.setup_environment(self.root_device)
        self._strategy.dump_hangs_to(Path(self.default_root_dir) / "hang")
        resume = self._find_checkpoint(ckpt_path)
        self._publisher.continue_runs(resume.state if resume is not None else {})
        if self.world_size > 1 and self._log_dir is None:  # rank zero picks version_N; all use it
            self._log_dir = self._strategy.broadcast(self.log_dir if self.is_global_zero else None)
        return resume

    def _setup(self, model: Module, stage: str) -> RunParts:
        if not isinstance(model, Module):
            raise SurgeTypeError(f"model must be a surge.Module, got {type(model).__name__}")
        self._publisher.reset_metrics()  # as Lightning: a stage shows only what it logs
        self._module, cfg = model, self._cfg  # (enter_stage attached the Trainer to the module)
        compiled = self._compiled.get(model)
        if compiled is None and cfg.compile is not None and stage == "fit":  # compiled once per model
            compiled = self._compiled[model] = CompiledCalls.of(model, cfg.compile)
        self._strategy.connect_stage(stage)
        for_stage = prepare_module(model, cfg, self._strategy, self._precision, compiled)
        extra = [*(self.profiler.callbacks() if self.profiler else ()), *compile_watch(cfg.compile, stage)]
        extra += [GoodputWatch(self._goodput, cfg.goodput_report, self._semantics)] if stage == "fit" else []
        self._hooks = hooks = Hooks(self, model, [*self.callbacks, *extra, *for_stage])
        move = batch_mover(model, self.datamodule, self._precision, cfg.channels_last)
        no_grad = self._strategy.evaluation_mode(cfg.inference_mode)
        self._parts = parts = RunParts(
            model, self._strategy, self._precision, hooks, move, self._publisher, no_grad, self._semantics
        )
        return parts

    # -- fit (its entry point, with the argument checks, is in stages.py) ---------------
    def _fit(
        self, model: Module, loaders: tuple[Any, Any], datamodule: DataModule | None, ckpt_path: Any
    ) -> None:
        """fit() after its argument checks: in this process, or in each rank a stage launcher starts."""
        self.datamodule = datamodule
        self._goodput.start()
        resume = self._connect(ckpt_path)
        if self._accelerator.name == "cpu" and self._semantics.checks_cpu_threads:
            check_cpu_threads(self.num_devices)
        self._run_status = self._fn = "fit"  # as Lightning: `trainer.state` says so in the setup hooks
        self.callbacks = enter_stage(self, model, datamodule, "fit", self._precision)
        parts = self._setup(model, "fit")
        if resume is not None:  # as Lightning: the module and the callbacks before the optimizers exist
            with self._goodput.timed("resume"):
                restore_modules(self._run_objects(), resume)
        data = self._new_fit_data(model, datamodule, loaders)
        self._optim = optim = self._fit_optimization(model, data)
        with self._staged("fit", data.loaders), self._fitting(parts, optim, data, resume):
            self.fit_loop.run()  # (Trainer.fit -> _fit -> FitLoop.run: nothing between)

    def _new_fit_data(self, model: Module, datamodule: DataModule | None, given: tuple[Any, Any]) -> FitData:
        """The owner of fit's loaders; the train loader asked for now when a tuner decides first."""
        cfg, strategy = self._cfg, self._strategy
        tuning = tune_setup.Tuning.of(cfg, strategy, self._accelerator.name, len(self._devices), self)
        self._validation, self._fit_data = (
            None,
            FitData(model, datamodule, given, self._loader_prep(), tuning, cfg),
        )
        if tune_setup.needs_train_first(tuning, cfg.scale_lr):  # a tuner decides before the optimizers
            with self._goodput.timed("tuning"):
                self._fit_data.ask_train()
        return self._fit_data

    def _fit_optimization(self, model: Module, data: FitData) -> Optimization:
        """The module's optimizers (their rates scaled by `scale_lr`), stepped as the arguments say."""
        cfg = self._cfg
        optimizers, schedulers = configured_optimizers(model, self._semantics)
        if cfg.scale_lr is not None:
            data.ask_train()
            micro_batches = data.accumulate * self._strategy.data_parallel_size
            tune_setup.scale_learning_rates(optimizers, schedulers, data.train, micro_batches, cfg)
        metrics = partial(getattr, self._publisher, "callback_metrics")
        return build_optimization(
            cfg, optimizers, schedulers, self._precision, self._hooks, metrics, self.fit_loop, self._semantics
        )

    def _start_training(
        self, parts: RunParts, optim: Optimization, data: FitData, validation: Validation, signals: SignalFlag
    ) -> None:
        """After the sanity check (as Lightning): the loaders not asked for yet, the batch plan, the
        loop bound."""
        data.start(self.fit_loop.epoch)
        step = compiled_training_step(self._cfg.compile, self._strategy, parts.module)
        settings, results, profiler = fit_settings(self._cfg), self._train_results, self.profiler
        compiled, uncounted = self._cfg.compile is not None, self._strategy.uncounted_flops
        flops = self._goodput.count_flops(parts.module.device, compiled, uncounted)
        self.fit_loop.bind(FitContext(
            parts, settings, optim, results, data, validation, self._stop, self, signals, profiler,
            step, Rollback.of(self.callbacks, parts, optim, settings), flops,  # a SpikeGuard's checks
        ))  # fmt: skip

    def _loader_prep(self) -> LoaderPreparation:
        return LoaderPreparation.of(self._cfg, self._accelerator.pin_memory, self._strategy)

    @contextlib.contextmanager
    def _fitting(
        self, parts: RunParts, optim: Optimization, data: FitData, resume: Found | None
    ) -> Iterator[None]:
        """Around the fit loop's run: the fit's start (hooks, sanity check, a resume's restore) before
        it, its end after; preemption signals are a flag while it runs."""
        hooks, cfg = parts.hooks, self._cfg
        signals = SignalFlag(getattr(self._strategy, "launcher", None), self._requeue)
        with signals.installed(), anomaly_mode(cfg.detect_anomaly):  # preemption: a flag
            hooks.call("on_fit_start")
            self._publisher.log_run_start(parts.module, cfg.enable_autolog_hparams, self.datamodule)
            validation = Validation(parts, data, cfg.check_val_every_n_epoch, self.fit_loop.logger_step)
            self._validation = validation  # its `training_rng` is what a checkpoint during it records
            steps = cfg.num_sanity_val_steps if self._sanity_checks(resume) else 0
            if steps and resume is not None:
                self.fit_loop.show_resumed_step(resume.state["loop"])
            validation.sanity_check(steps, self._sanity)
            self._start_training(parts, optim, data, validation, signals)
            # (and the compiled artifacts, before the first compiled step)
            with self._goodput.timed("resume"):
                rng = restore_training(self._run_objects(), resume) if resume is not None else None
                self._compile_cache.load_beside(resume.path if resume is not None else None, self._goodput)
            if rng is not None:
                set_rng_state(rng)  # the resumed run draws exactly what the uninterrupted one would
            hooks.call("on_train_start")  # each submodule in the mode the user left it (as Lightning)
            if self.profiler is not None:
                self.profiler.setup(self)
            self.fit_loop.context().end.start_at(self.fit_loop.batches_done)  # (after a resume's restore)
            yield  # the fit loop runs
            self.fit_loop.context().end.say(
                self.fit_loop, cfg.limit_train_batches
            )  # why it stopped; if it trained
            if self.profiler is not None:
                self.profiler.finish(self)
            self._precision.report_skipped_steps()
            hooks.call("on_train_end")
            hooks.call("on_fit_end")

    def _run_stage(self, stage: str, body: Any, loaders: Any = ()) -> Any:
        """`body()` as `stage` (None when a tuner ended it after its start hook)."""
        result = None
        with self._staged(stage, loaders):
            result = body()
        return result

    def _sanity_checks(self, resume: Found | None) -> bool:
        """Whether this fit runs the sanity check: a new one does; a resumed one never in surge's
        own API, and in the Lightning mode as Lightning's: from a checkpoint written after a
        training epoch's end (its loop state says the epoch is done)."""
        if resume is None:
            return True
        loop = resume.state.get("loop")
        at_epoch_end = isinstance(loop, dict) and bool(loop.get("epoch_done"))
        return self._semantics.sanity_check_on_resume == "after_epoch_end" and at_epoch_end

    @contextlib.contextmanager
    def _staged(self, stage: str, loaders: Any = ()) -> Iterator[None]:
        """Around a stage's run: its end (checkpoints durable, the stage left), or on a failure the
        exception hooks and the strategy's teardown; the loggers finalized either way. A tuner's
        `StageExit` ends it as if it had finished."""
        status = "success"
        if self._cfg.barebones:  # no progress bar: say that the run started
            info(STARTED)
        try:
            with contextlib.suppress(StageExit):  # a tuner's fit ends after its start hook
                yield
            self._strategy.finish_checkpoints()  # a background write is durable before the stage ends
            leave_stage(self._hooks, self._module, self.datamodule, stage)
        except BaseException as err:
            status = "interrupted" if isinstance(err, KeyboardInterrupt | Preempted) else "failed"
            self._hooks.callbacks("on_exception", err)
            if self.datamodule is not None:
                self.datamodule.on_exception(err)
            self._strategy.finish_checkpoints(leaving=err)  # after OnExceptionCheckpoint's save
            self._strategy.explain_failure(err)
            self._strategy.teardown(failed=not isinstance(err, Preempted))
            raise
        finally:
            self._publisher.finalize_loggers(status)
            self._run_status = "finished" if status == "success" else status
            if self._module is not None:
                self._module._attach(results=None)
            data_mod.stop_persistent_workers(loaders() if callable(loaders) else loaders)

    # -- evaluate and predict --------------------------------------------------------------
    def _predict(self, model: Module | None, loaders: Any, ckpt: Any, datamodule: Any, keep: bool) -> Any:
        got = self._eval_setup("predict", model, loaders, ckpt, datamodule)  # (parts, loaders, limits)
        return self._run_stage("predict", partial(self.predict_loop.run, *got, self.callbacks, keep), got[1])

    def _evaluate(
        self, stage: str, model: Module | None, dataloaders: Any, ckpt_path: Any, datamodule: Any
    ) -> list[dict[str, float]]:
        parts, loaders, limits = self._eval_setup(stage, model, dataloaders, ckpt_path, datamodule)
        step = self.global_step
        return self._run_stage(stage, lambda: run_evaluation(parts, stage, loaders, limits, step), loaders)

    def _eval_setup(
        self, stage: str, model: Module | None, dataloaders: Any, ckpt_path: Any, datamodule: Any
    ) -> tuple[RunParts, list[Any], list[int | float]]:
        """The model set up (and restored) with its run's parts; the stage's loaders and their batch limits."""
        model = model if model is not None else self._module
        if model is None:
            raise MisconfigurationError(f"{stage}() needs a model: pass model= (this Trainer ran no fit()).")
        if isinstance(dataloaders, DataModule):
            datamodule, dataloaders = dataloaders, None
        self.datamodule = datamodule if datamodule is not None else self.datamodule
        if stage != "predict":
            check_step_defined(model, "validation_step" if stage == "validate" else "test_step", stage)
        self._connect()
        self._run_status = self._fn = stage
        self.callbacks = enter_stage(self, model, self.datamodule, stage, self._precision)
        arg = f"limit_{'val' if stage == 'validate' else stage}_batches"
        skip = getattr(self._cfg, arg) == 0  # no batch to run: the loaders are not even asked for
        given, single = ([], False) if skip else eval_loaders(stage, dataloaders, self.datamodule, model)
        parts, prep = self._setup(model, stage), self._loader_prep()
        runs = prep.evaluation(given, single, getattr(self._cfg, arg), arg)
        loaders, limits = runs.loaders, runs.limits
        self._stage_loaders[stage] = (runs.given, runs.reported)
        found = self._find_checkpoint(ckpt_path)
        if ckpt_path == "auto" and found is None:
            info(f'{stage}(ckpt_path="auto"): no checkpoint in {self.default_root_dir}; weights as they are')
        if found is not None:
            restore_model(self._strategy, model, found.state, found.path)
        return parts, loaders, limits

    # -- checkpoints -----------------------------------------------------------------------
    def save_checkpoint(self, filepath: str | Path, weights_only: bool = False) -> None:
        """Write the whole training state (or just the weights) to `filepath`, atomically."""
        with self._goodput.saving(self._strategy.checkpoint_writer.asynchronous):
            self._strategy.save_checkpoint(checkpoint_state(self._run_objects(), weights_only), filepath)
            self._compile_cache.save_beside(filepath, self.is_global_zero)
        if self._run_status != "fit":  # only a running fit goes on while it writes
            self._strategy.finish_checkpoints()

    def _run_objects(self) -> RunObjects:
        module = self._module
        if module is None:
            raise MisconfigurationError("save_checkpoint() needs a model: call fit() first.")
        parts = (module, self._strategy, self._precision, self._hooks, self.fit_loop, self._optim)
        more = (self._train_results, self.callbacks, self.datamodule, self._fit_data)
        return RunObjects(*parts, *more, self.training_rng, self._publisher, self._goodput)

    def _find_checkpoint(self, ckpt_path: str | Path | None) -> Found | None:
        self._strategy.finish_checkpoints()  # a file still being written is read whole
        load, callback, root = self._strategy.load_checkpoint, self.checkpoint_callback, self.default_root_dir
        with self._goodput.timed("resume"):
            found = ckpt_path is not None and find_checkpoint(ckpt_path, load, Path(root), callback)
        self.ckpt_path = str(found.path) if found else None  # Lightning's trainer.ckpt_path
        return found or None
