"""Trainer arguments Lightning has that surge answers differently: each is either honoured or
refused here, by name, before any work (never accepted and ignored)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ..config.semantics import Semantics
from ..errors import MisconfigurationError, bad_value
from ..rank_zero import warn
from .plugins import Plugins, resolve_plugins

if TYPE_CHECKING:
    from ..launch.signals import RequeuePolicy

# Lightning's Trainer arguments whose default is None, and the value None stands for (Lightning's default).
NONE_MEANS = {
    "min_epochs": 0, "limit_train_batches": 1.0, "limit_val_batches": 1.0, "limit_test_batches": 1.0,
    "limit_predict_batches": 1.0, "val_check_interval": 1.0, "num_sanity_val_steps": 2,
    "log_every_n_steps": 50, "enable_checkpointing": True, "enable_progress_bar": True,
    "enable_model_summary": True, "precision": "32-true", "logger": True,
    "accelerator": "auto", "devices": "auto", "strategy": "auto",
}  # fmt: skip


def lightning_defaults(cfg: Any) -> None:
    """`None` for an argument Lightning defaults to None means Lightning's default: set it here,
    before anything is checked. `check_val_every_n_epoch=None` is not a default but a mode (validate
    every `val_check_interval` batches counted across epochs): honoured for an int interval, refused
    otherwise (a fraction in Lightning's words)."""
    if cfg.check_val_every_n_epoch is None and isinstance(cfg.val_check_interval, float):  # as given
        raise MisconfigurationError(  # Lightning's words: a fraction of an epoch needs epochs
            "`val_check_interval` should be an integer or a time-based duration (str 'DD:HH:MM:SS', "
            "datetime.timedelta, or dict kwargs for timedelta) when `check_val_every_n_epoch=None`."
        )
    given_interval = cfg.val_check_interval
    for name, value in NONE_MEANS.items():
        if getattr(cfg, name) is None:
            setattr(cfg, name, value)
    if cfg.check_val_every_n_epoch is None and (
        given_interval is None or cfg.reload_dataloaders_every_n_epochs
    ):
        raise MisconfigurationError(
            "check_val_every_n_epoch=None (validation every val_check_interval batches counted across epochs) "
            "needs val_check_interval=K, an int, and no reload_dataloaders_every_n_epochs (the count assumes "
            f"the same batches each epoch); got val_check_interval={given_interval!r}, "
            f"reload_dataloaders_every_n_epochs={cfg.reload_dataloaders_every_n_epochs!r}. "
            "Or pass check_val_every_n_epoch=N to validate at the end of every N epochs."
        )
    if not isinstance(cfg.enable_autolog_hparams, bool):
        raise bad_value("enable_autolog_hparams", cfg.enable_autolog_hparams, "True or False")


def check_lightning_arguments(cfg: Any) -> None:
    """`min_steps`, `inference_mode`, `sync_batchnorm` are honoured; `plugins` becomes one decided
    value (arguments/plugins.py); `model_registry` is refused unless left at its default, with what
    to do instead (`barebones` is arguments/barebones.py's, applied before the config is built)."""
    steps = cfg.min_steps
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 0):
        raise bad_value("min_steps", steps, "None or an int >= 0")
    for name in ("inference_mode", "sync_batchnorm", "barebones"):
        if not isinstance(getattr(cfg, name), bool):
            raise bad_value(name, getattr(cfg, name), "True or False")
    flags = {"precision": cfg.precision, "async_checkpoint": cfg.async_checkpoint}
    plugins = resolve_plugins(cfg.plugins, **flags)
    given = getattr(cfg.strategy, "plugin_objects", ())  # DDPStrategy(cluster_environment=...) and the like
    cfg.plugins = plugins = plugins.combined(resolve_plugins(list(given), **flags)) if given else plugins
    if plugins.precision is not None:
        cfg.precision = plugins.precision
    cfg.sync_batchnorm = cfg.sync_batchnorm or plugins.sync_batchnorm
    if cfg.model_registry is not None:
        raise MisconfigurationError(
            f"model_registry={cfg.model_registry!r} is not supported: surge uploads nothing; write the weights "
            "with trainer.export(path) (safetensors) and upload them yourself."
        )


def requeue_of(plugins: Plugins, semantics: Semantics) -> RequeuePolicy:
    """The requeue policy of `plugins`, writing the checkpoint `semantics` names: in the Lightning
    mode, as Lightning, `hpc_ckpt_<N>.ckpt` on requeue, which fit() resumes under SLURM."""
    hpc = plugins.requeue.hpc or semantics.requeue_checkpoint == "hpc_ckpt"
    return dataclasses.replace(plugins.requeue, hpc=hpc)


def warn_default_max_epochs(cfg: Any) -> None:
    """Lightning's warning when fit starts with no epoch, step or time limit given: 1000 epochs."""
    if cfg.max_epochs_defaulted:
        warn(
            "`max_epochs` was not set. Setting it to 1000 epochs. To train without an epoch limit, set `max_epochs=-1`."
        )


def check_sync_batchnorm(sync_batchnorm: bool, device_type: str, world_size: int) -> None:
    """torch's SyncBatchNorm synchronises on GPUs only: refuse it on CPU processes before any work."""
    if sync_batchnorm and world_size > 1 and device_type not in ("cuda", "xpu"):
        raise MisconfigurationError(
            f"sync_batchnorm=True with {world_size} processes on {device_type}: torch's SyncBatchNorm "
            "synchronises only on CUDA (or XPU) devices. Use accelerator='cuda', or sync_batchnorm=False."
        )
