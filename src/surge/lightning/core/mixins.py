"""`lightning.pytorch.core.mixins` (and `.hparams_mixin`): `HyperparametersMixin`, surge's own, which
gives a class `save_hyperparameters()`, `hparams` and `hparams_initial` as the module has them."""

from __future__ import annotations

from ...module.hparams import HyperparametersMixin

__all__ = ["HyperparametersMixin"]
