"""`lightning.pytorch.core.hooks`: `ModelHooks`, surge's module hooks (for `isinstance` checks and
to read a hook's default); Lightning's `DataHooks` and `CheckpointHooks` are refused by name."""

from __future__ import annotations

from ...module.model_hooks import ModelHooks
from ..refuse import module_getattr

__getattr__ = module_getattr(
    "lightning.pytorch.core.hooks",
    {
        "DataHooks": "surge.Module and surge.DataModule define the data hooks themselves; subclass one of them",
        "CheckpointHooks": "surge.Module defines on_save_checkpoint/on_load_checkpoint; subclass it",
    },
)

__all__ = ["ModelHooks"]
