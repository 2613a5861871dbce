"""Assembling a Trainer's parts from its validated arguments: strategy, callbacks, loggers, and
the batch pipeline. Each is a plain function of what it needs, so the Trainer only composes."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from . import data as data_mod
from . import speed
from .accelerators import Accelerator
from .callbacks.base import Callback
from .config import TrainerConfig
from .errors import MisconfigurationError, SurgeTypeError
from .launch.environment import ClusterEnvironment
from .loggers.base import Logger
from .module import Module
from .precision import Precision
from .strategies import DataParallelStrategy, DDPStrategy, FSDPStrategy, SingleDeviceStrategy, Strategy
from .strategies.parallel import ProcessGroupStrategy


def build_strategy(
    strategy: str | Strategy,
    cfg: TrainerConfig,
    accelerator: Accelerator,
    devices: list[int],
    env: ClusterEnvironment,
) -> Strategy:
    """The strategy for `strategy=`, checked against the devices and the launch environment `env`."""
    per_node, nodes = len(devices), cfg.num_nodes
    if env.world_size > 1 and cfg.devices == "auto" and cfg.num_nodes == 1:
        per_node, nodes = env.local_world_size, env.num_nodes  # the launcher decided
    if isinstance(strategy, ProcessGroupStrategy):
        strategy.configure(per_node, nodes, env)
    if isinstance(strategy, Strategy):
        return strategy
    if strategy == "dp":
        if accelerator.name != "cuda":
            raise MisconfigurationError(
                f"strategy='dp' splits batches over CUDA devices, but accelerator={accelerator.name!r}; "
                "use strategy='ddp' (faster anyway, and it runs on CPU)."
            )
        if nodes > 1 or env.world_size > 1:
            raise MisconfigurationError(
                f"strategy='dp' runs in one process on one machine, but num_nodes={nodes} and "
                f"WORLD_SIZE={env.world_size}; use strategy='ddp'."
            )
        return DataParallelStrategy(list(devices))
    if strategy == "single" or (strategy == "auto" and per_node * nodes == 1 and env.world_size == 1):
        if per_node * nodes > 1:
            raise MisconfigurationError(
                f"strategy='single' runs one process, but devices={cfg.devices!r}, num_nodes={nodes} "
                f"ask for {per_node * nodes}; use strategy='ddp'."
            )
        return SingleDeviceStrategy()
    group = FSDPStrategy() if strategy == "fsdp" else DDPStrategy()
    group.configure(per_node, nodes, env)
    return group


def build_callbacks(cfg: TrainerConfig) -> list[Callback]:
    """The user's callbacks plus the defaults the flags ask for; checkpointing runs last."""
    from .callbacks.checkpoint import ModelCheckpoint
    from .callbacks.progress import ProgressBar
    from .callbacks.summary import ModelSummary

    callbacks = list(cfg.callbacks)
    has = lambda cls: any(isinstance(cb, cls) for cb in callbacks)  # noqa: E731
    if has(ModelCheckpoint) and not cfg.enable_checkpointing:
        raise MisconfigurationError(
            "callbacks contains a ModelCheckpoint but enable_checkpointing=False; drop one."
        )
    if cfg.enable_checkpointing and not has(ModelCheckpoint):
        callbacks.append(ModelCheckpoint())
    if has(ProgressBar) and not cfg.enable_progress_bar:
        raise MisconfigurationError(
            "callbacks contains a ProgressBar but enable_progress_bar=False; drop one."
        )
    if cfg.enable_progress_bar and not has(ProgressBar):
        callbacks.append(ProgressBar())
    if cfg.enable_model_summary and not has(ModelSummary):
        callbacks.append(ModelSummary())
    # Checkpointing last, so the state it saves includes what other callbacks did this step.
    return [cb for cb in callbacks if not isinstance(cb, ModelCheckpoint)] + [
        cb for cb in callbacks if isinstance(cb, ModelCheckpoint)
    ]


def batch_mover(model: Module, precision: Precision, channels_last: bool) -> Callable[[Any], Any] | None:
    """What each batch goes through before the step (device move, input cast, memory format);
    None when nothing is needed, so the loop skips the call."""
    device = model._device
    custom = type(model).transfer_batch_to_device is not Module.transfer_batch_to_device
    if device.type == "cpu" and not (custom or precision.converts_input or channels_last):
        return None  # batches are already where the steps run
    if custom:
        move = lambda b: model.transfer_batch_to_device(b, device, 0)  # noqa: E731
    else:
        move = lambda b: data_mod.move_to_device(b, device)  # noqa: E731
    steps = [move]
    if precision.converts_input:
        steps.append(precision.convert_input)
    if channels_last:
        steps.append(lambda b: data_mod.apply_to_tensors(b, speed.to_channels_last))
    if len(steps) == 1:
        return move

    def pipeline(batch: Any) -> Any:
        for fn in steps:
            batch = fn(batch)
        return batch

    return pipeline


def build_loggers(logger: Any, root: Path) -> list[Logger]:
    from .loggers.csv import CSVLogger

    if logger is True:
        return [CSVLogger(root)]
    if logger is False or logger is None:
        return []
    items = logger if isinstance(logger, list | tuple) else [logger]
    for item in items:
        if not isinstance(item, Logger):
            raise SurgeTypeError(
                f"logger={item!r} is not valid: pass True, False, a surge Logger or a list of them."
            )
    return list(items)


def set_deterministic(mode: bool | str) -> None:
    if mode:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(bool(mode), warn_only=mode == "warn")
    torch.backends.cudnn.deterministic = bool(mode)
    if mode:
        torch.backends.cudnn.benchmark = False
