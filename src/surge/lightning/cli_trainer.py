"""The `trainer` section of a `LightningCLI` config: Lightning's Trainer arguments, in Lightning's
order and with Lightning's defaults, so `--print_config` writes what Lightning writes and a config
Lightning dumped parses here. Each value is passed to surge's Trainer, which reads None as
Lightning's default (config/lightning.py). surge's own Trainer arguments (`compile`,
`matmul_precision`, ...) are not in this section; `surge fit --config` (cli/config.py) has them.
"""

from __future__ import annotations

import inspect
import typing
from typing import Any

from jsonargparse import class_from_function

from ..trainer import Trainer

# Lightning 2.6's Trainer(...) keyword arguments, in its order, with its defaults.
LIGHTNING_TRAINER: dict[str, Any] = {
    "accelerator": "auto", "strategy": "auto", "devices": "auto", "num_nodes": 1, "precision": None,
    "logger": None, "callbacks": None, "fast_dev_run": False, "max_epochs": None, "min_epochs": None,
    "max_steps": -1, "min_steps": None, "max_time": None, "limit_train_batches": None,
    "limit_val_batches": None, "limit_test_batches": None, "limit_predict_batches": None,
    "overfit_batches": 0.0, "val_check_interval": None, "check_val_every_n_epoch": 1,
    "num_sanity_val_steps": None, "log_every_n_steps": None, "enable_checkpointing": None,
    "enable_progress_bar": None, "enable_model_summary": None, "accumulate_grad_batches": 1,
    "gradient_clip_val": None, "gradient_clip_algorithm": None, "deterministic": None, "benchmark": None,
    "inference_mode": True, "use_distributed_sampler": True, "profiler": None, "detect_anomaly": False,
    "barebones": False, "plugins": None, "sync_batchnorm": False, "reload_dataloaders_every_n_epochs": 0,
    "default_root_dir": None, "enable_autolog_hparams": True, "model_registry": None,
}  # fmt: skip


def lightning_trainer(**kwargs: Any) -> Trainer:
    """surge's Trainer from Lightning's arguments (its signature is set below)."""
    return Trainer(**kwargs)


def _optional(annotation: Any, default: Any) -> Any:
    return annotation | None if default is None else annotation


def _signature() -> inspect.Signature:
    hints = typing.get_type_hints(Trainer.__init__)
    params = [
        inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=_optional(hints[name], default)
        )
        for name, default in LIGHTNING_TRAINER.items()
    ]
    return inspect.Signature(params, return_annotation=Trainer)


lightning_trainer.__signature__ = _signature()  # type: ignore[attr-defined]
LightningTrainer = class_from_function(lightning_trainer, Trainer, name="LightningTrainer")


def trainer_arguments_class(trainer_class: type[Trainer]) -> type:
    """What `LightningCLI` reads the `trainer` section from: Lightning's arguments for surge's
    Trainer itself; a subclass's own signature (its `**kwargs` resolve to surge's Trainer)."""
    return LightningTrainer if trainer_class is Trainer else trainer_class
