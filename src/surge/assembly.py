"""Assembling a Trainer's parts from its validated arguments: strategy, callbacks, loggers, and
the batch pipeline. Each is a plain function of what it needs, so the Trainer only composes."""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

import torch

from . import data as data_mod
from . import speed
from .accelerators import Accelerator
from .arguments import TrainerConfig
from .arguments.lightning import check_sync_batchnorm
from .callbacks.base import Callback, overrides
from .callbacks.timer import Timer
from .checkpoint.writer import AsyncCheckpointWriter, CheckpointWriter
from .config.registry import STRATEGIES
from .config.semantics import Semantics
from .datamodule import DataModule
from .errors import MisconfigurationError, SurgeTypeError
from .launch.environment import ClusterEnvironment
from .loggers.base import Logger
from .loops.context import FitSettings
from .loops.fit import FitLoop
from .module import Module
from .module.log_hooks import guarded
from .optim import Optimization
from .optim.nonfinite import NonFiniteGuard
from .precision import Precision
from .rank_zero import warn
from .speed import activation_checkpointing
from .speed.compiled_calls import CompiledCalls
from .speed.compiling import compile_optimizers
from .strategies import Layout, Strategy


def build_strategy(
    strategy: str | Strategy,
    cfg: TrainerConfig,
    accelerator: Accelerator,
    devices: list[int],
    env: ClusterEnvironment,
) -> Strategy:
    """The strategy for `strategy=` (a registered name, "auto", or an object), checked against the
    devices and the launch environment `env`."""
    layout = strategy_layout(cfg, accelerator, devices, env)
    if isinstance(strategy, Strategy):
        strategy.check_layout(layout)
    else:
        if strategy == "auto":  # in a notebook only a fork can start ranks (as Lightning)
            strategy = "single" if layout.processes == 1 and env.world_size == 1 else auto_ddp(env)
        cls = cast("type[Strategy]", STRATEGIES.get(strategy))  # registered by register_strategy
        strategy = cls.from_layout(layout)
    strategy.attach_layout(layout)
    strategy.check_settings(compile=cfg.compile, activation_checkpointing=cfg.activation_checkpointing)
    if cfg.activation_checkpointing is not None and strategy.activation_checkpointing_policy is not None:
        raise MisconfigurationError(
            f"activation_checkpointing={cfg.activation_checkpointing!r} and the strategy's own policy "
            f"({strategy.activation_checkpointing_policy!r}) both choose what to checkpoint; give one of them."
        )
    writer = cfg.plugins.checkpoint_writer  # a CheckpointIO plugin's, else as async_checkpoint says
    strategy.use_checkpoint_writer(
        writer or (AsyncCheckpointWriter() if cfg.async_checkpoint else CheckpointWriter())
    )
    return strategy


def auto_ddp(env: ClusterEnvironment) -> str:
    """DDP for `strategy="auto"` on several processes: started by a fork in an interactive session."""
    from .launch.multiprocessing_launcher import is_interactive  # (the launchers: only for several processes)

    return "ddp_fork" if env.source == "local" and is_interactive() else "ddp"


def strategy_layout(
    cfg: TrainerConfig, accelerator: Accelerator, devices: list[int], env: ClusterEnvironment
) -> Layout:
    """The processes the Trainer's arguments ask for; under a launcher with `devices="auto"`, its own."""
    per_node, nodes = len(devices), cfg.num_nodes
    if env.world_size > 1 and cfg.devices == "auto" and cfg.num_nodes == 1:
        per_node, nodes = env.local_world_size, env.num_nodes  # the launcher decided
    return Layout(
        accelerator=accelerator, devices=list(devices), requested_devices=cfg.devices,
        processes_per_node=per_node, num_nodes=nodes, env=env,
    )  # fmt: skip


def build_callbacks(cfg: TrainerConfig) -> list[Callback]:
    """The user's callbacks plus the defaults the flags ask for; checkpointing runs last."""
    from .callbacks.checkpoint import ModelCheckpoint
    from .callbacks.progress import ProgressBar
    from .callbacks.spike_guard import SpikeGuard
    from .callbacks.summary import ModelSummary

    callbacks = list(cfg.callbacks)

    def has(cls: type) -> bool:
        return any(isinstance(cb, cls) for cb in callbacks)

    if has(ModelCheckpoint) and not cfg.enable_checkpointing:
        raise MisconfigurationError(
            "Trainer was configured with `enable_checkpointing=False` but found `ModelCheckpoint` in callbacks "
            "list; drop one."
        )
    if cfg.enable_checkpointing and not has(
        ModelCheckpoint
    ):  # kept under fast_dev_run (saving nothing), as Lightning
        callbacks.append(ModelCheckpoint())
    if has(ProgressBar) and not cfg.enable_progress_bar:
        raise MisconfigurationError(
            "Trainer was configured with `enable_progress_bar=False` but found "
            f"`{next(type(cb).__name__ for cb in callbacks if isinstance(cb, ProgressBar))}` in callbacks list; drop one."
        )
    if cfg.enable_progress_bar and not has(ProgressBar):
        callbacks.append(ProgressBar())
    if cfg.enable_model_summary and not has(ModelSummary):
        callbacks.append(ModelSummary())
    if cfg.on_nonfinite == "rollback" and not has(SpikeGuard):  # non-finite losses only
        callbacks.append(SpikeGuard(threshold=math.inf))
    if cfg.max_time is not None:  # as Lightning: a step-interval Timer
        callbacks.append(Timer(duration=cfg.max_time, interval="step"))
    # Checkpointing last, so the state it saves includes what other callbacks did this step.
    return [cb for cb in callbacks if not isinstance(cb, ModelCheckpoint)] + [
        cb for cb in callbacks if isinstance(cb, ModelCheckpoint)
    ]


def batch_mover(
    model: Module, datamodule: Any, precision: Precision, channels_last: bool
) -> Callable[..., Any] | None:
    """What each batch goes through before the step, `(batch, dataloader_idx=0)`: the batch hooks
    overridden (Lightning's order), the device move, input cast, memory format; None when nothing
    is needed, so the loop skips the call."""
    device = model._device
    before, transfer, after = (_batch_hook(name, model, datamodule) for name in BATCH_HOOKS)
    converts = precision.converts_input
    if device.type == "cpu" and not (before or transfer or after or converts or channels_last):
        return None  # batches are already where the steps run
    move = data_mod.move_to_device
    if not (before or transfer or after or converts or channels_last):
        return lambda batch, dataloader_idx=0: move(batch, device)

    def pipeline(batch: Any, dataloader_idx: int = 0) -> Any:
        if before is not None:
            batch = before(batch, dataloader_idx)
        batch = transfer(batch, device, dataloader_idx) if transfer is not None else move(batch, device)
        if after is not None:
            batch = after(batch, dataloader_idx)
        if converts:
            batch = precision.convert_input(batch)
        if channels_last:
            batch = data_mod.apply_to_tensors(batch, speed.to_channels_last)
        return batch

    return pipeline


BATCH_HOOKS = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")


def _batch_hook(name: str, model: Module, datamodule: Any) -> Callable[..., Any] | None:
    """The datamodule's `name` if it overrides it, else the module's if it does, else None."""
    own = overrides(model, Module, name)
    if datamodule is not None and overrides(datamodule, DataModule, name):
        if own:
            warn(f"{name} is defined on both {type(model).__name__} and {type(datamodule).__name__}: "
                 "the datamodule's is used, as in Lightning")  # fmt: skip
        return getattr(datamodule, name)
    return guarded(model, name, getattr(model, name)) if own else None  # `self.log` refused there


def build_loggers(logger: Any, root: Path, semantics: Semantics) -> list[Logger]:
    """The loggers `logger=` asks for; True: TensorBoard's (when installed) and CSV's."""
    from .loggers.default import default_loggers

    if logger is True:
        return default_loggers(root, semantics)
    if logger is False or logger is None:
        return []
    items = logger if isinstance(logger, list | tuple) else [logger]
    for item in items:
        if not isinstance(item, Logger):
            raise SurgeTypeError(
                f"logger={item!r} is not valid: pass True, False, a surge Logger or a list of them."
            )
    return list(items)


def anomaly_mode(on: bool) -> contextlib.AbstractContextManager:
    """`detect_anomaly=True`: torch's autograd anomaly detection around the fit (slow; for debugging)."""
    return torch.autograd.detect_anomaly() if on else contextlib.nullcontext()


def set_deterministic(mode: bool | str) -> None:
    if mode:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(bool(mode), warn_only=mode == "warn")
    torch.backends.cudnn.deterministic = bool(mode)
    if mode:
        torch.backends.cudnn.benchmark = False


def build_optimization(
    cfg: TrainerConfig,
    optimizers: list[Any],
    schedulers: list[Any],
    precision: Precision,
    hooks: Any,
    metrics: Callable[[], Mapping[str, Any]],
    loop: FitLoop,
    semantics: Semantics,
) -> Optimization:
    """The fit's optimizer steps: clipping and the non-finite guard as the arguments ask; where
    training stands is `loop`'s."""
    return Optimization(
        optimizers,
        schedulers,
        precision,
        hooks,
        cfg.gradient_clip_val,
        cfg.gradient_clip_algorithm,
        metrics,
        guard=NonFiniteGuard(cfg.on_nonfinite, optimizers, precision.skips_nonfinite_steps),
        where=loop.where,
        compiled=compile_optimizers(cfg.compile, optimizers, bool(schedulers)),
        semantics=semantics,
    )


def fit_settings(cfg: TrainerConfig) -> FitSettings:
    """The settings a fit loop reads (the tuners' decisions are `FitData`'s)."""
    return FitSettings(
        max_epochs=cfg.max_epochs,
        min_epochs=cfg.min_epochs,
        min_steps=cfg.min_steps or 0,
        max_steps=cfg.max_steps,
        log_every_n_steps=cfg.log_every_n_steps,
    )


def prepare_module(
    model: Module,
    cfg: TrainerConfig,
    strategy: Strategy,
    precision: Precision,
    compiled: CompiledCalls | None,
) -> list[Callback]:
    """Put the module where and how it trains: the backend flags, the precision's dtype, the
    strategy's device (and wrapper), channels_last, the compiled calls of this model (if any);
    then note its device. Returns the callbacks that undo what holds for this stage only
    (activation checkpointing's hooks, the compiled calls)."""
    if cfg.deterministic is not None:
        set_deterministic(cfg.deterministic)
    speed.apply_backend_flags(cfg.benchmark, cfg.matmul_precision)
    model = precision.convert_module(model)
    if cfg.sync_batchnorm:  # before the strategy wraps it, as Lightning does
        check_sync_batchnorm(True, strategy.device.type, strategy.world_size)
        torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    policy = cfg.activation_checkpointing or strategy.activation_checkpointing_policy  # one, at most
    checkpointing = activation_checkpointing.apply(model, policy)  # before sharding, compile
    strategy.setup_module(model)
    if cfg.channels_last:
        # nn.Module.to takes memory_format (documented), but torch's overloads leave it out
        model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    for_stage: list[Callback] = list(checkpointing)
    if compiled is not None:
        for_stage.append(compiled.install(strategy.forward_modules(model)))
    model._attach(device=next((p.device for p in model.parameters()), strategy.device))
    speed.tensor_core_hint(model.device, precision)
    return for_stage
