"""`lightning.pytorch.tuner.Tuner`: Lightning's `Tuner(trainer).lr_find(...)` and
`.scale_batch_size(...)`, run as Lightning runs them: the trainer's `fit()` with the tuner's callback
(`LearningRateFinder` / `BatchSizeFinder`) in front of the trainer's callbacks, ended once the callback
has decided (`stage_exit`). So the fit's setup hooks run, the tuned value is set where the module keeps
it (an attribute, a key of its `hparams`, the datamodule's), and afterwards `trainer.train_dataloader`,
`trainer.val_dataloaders` and `trainer.datamodule` are the fit's; the model's weights, its optimizers
and the RNG (drawn from by the loaders' hooks too) are restored. `scale_batch_size(method="validate"/"test"/"predict")` runs that stage
instead, its trials being that stage's steps on the loader its hook returns."""

from __future__ import annotations

from typing import Any

from ..callbacks.base import Callback
from ..callbacks.batch_size_finder import BatchSizeFinder, check_margin
from ..callbacks.lr_finder import LearningRateFinder as SurgeLearningRateFinder
from ..callbacks.tuned_attr import TunedAttributeError
from ..datamodule import DataModule
from ..errors import MisconfigurationError, bad_value
from ..loops.stage_exit import ExitAfterTuning
from ..module import Module
from ..rank_zero import warn
from ..seed import rng_state, set_rng_state
from ..trainer import Trainer
from .lr_finder import LearningRateFinder, LRFinder

METHODS = ("fit", "validate", "test", "predict")


class Tuner:
    """Runs Lightning's tuners on `trainer`."""

    def __init__(self, trainer: Trainer) -> None:
        if not isinstance(trainer, Trainer):
            raise bad_value("Tuner(trainer)", trainer, "a lightning.pytorch.Trainer")
        self._trainer = trainer

    def lr_find(
        self,
        model: Module,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        dataloaders: Any = None,
        datamodule: DataModule | None = None,
        method: str = "fit",
        min_lr: float = 1e-8,
        max_lr: float = 1,
        num_training: int = 100,
        mode: str = "exponential",
        early_stop_threshold: float | None = 4.0,
        update_attr: bool = True,
        attr_name: str = "",
    ) -> LRFinder | None:
        """The learning-rate range test; with `update_attr`, the suggested rate is set on `attr_name`
        (default: the module's `lr` or `learning_rate`). Skipped (None) under fast_dev_run, as in Lightning."""
        if method != "fit":
            raise MisconfigurationError(
                f"Tuner.lr_find(method={method!r}): method='fit' is the only valid configuration to run lr finder."
            )
        _check_loaders(train_dataloaders, val_dataloaders, dataloaders, method)
        _refuse_configured(self._trainer, SurgeLearningRateFinder)
        if _skipped(self._trainer, "learning rate finder"):
            return None
        finder = LearningRateFinder(
            min_lr=min_lr, max_lr=max_lr, num_training_steps=num_training, mode=mode,
            early_stop_threshold=early_stop_threshold, update_attr=update_attr, attr_name=attr_name,
        )  # fmt: skip
        self._run_with(finder, "fit", model, (train_dataloaders, val_dataloaders), datamodule)
        return finder.optimal_lr  # type: ignore[return-value]  # Lightning's finder makes an LRFinder

    def scale_batch_size(
        self,
        model: Module,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        dataloaders: Any = None,
        datamodule: DataModule | None = None,
        method: str = "fit",
        mode: str = "power",
        steps_per_trial: int = 3,
        init_val: int = 2,
        max_trials: int = 25,
        batch_arg_name: str = "batch_size",
        margin: float = 0.05,
        max_val: int = 8192,
    ) -> int | None:
        """The batch size `BatchSizeFinder`'s search settles on, set on `batch_arg_name`; the train
        loader is re-created from `train_dataloader()`, as Lightning does, so loaders passed in are refused."""
        _check_loaders(train_dataloaders, val_dataloaders, dataloaders, method)
        if self._trainer.world_size > 1:
            raise MisconfigurationError(
                "Tuner.scale_batch_size: tuning the batch size is not supported with distributed strategies."
            )
        _refuse_configured(self._trainer, BatchSizeFinder)
        margin, max_val = check_margin(margin, max_val)
        if _skipped(self._trainer, "batch size scaler"):
            return None
        finder = _StageBatchSizeFinder(
            mode=mode, steps_per_trial=steps_per_trial, init_val=init_val, max_trials=max_trials,
            batch_arg_name=batch_arg_name, margin=margin, max_val=max_val,
        )  # fmt: skip
        loaders = (train_dataloaders, val_dataloaders) if method == "fit" else (dataloaders,)
        self._run_with(finder, method, model, loaders, datamodule)
        return finder.optimal_batch_size

    def _run_with(
        self, finder: Callback, method: str, model: Module, loaders: tuple, datamodule: Any
    ) -> None:
        """The stage `method` with `finder` first among the callbacks, ended once it decided; the
        trainer's callbacks as before."""
        trainer, ending = self._trainer, ExitAfterTuning(method)
        trainer.callbacks = [finder, ending, *trainer.callbacks]
        rng = rng_state()  # as Lightning: tuning draws nothing from the run's random streams
        try:
            getattr(trainer, method)(model, *loaders, datamodule=datamodule)
        finally:
            set_rng_state(rng)
            trainer.callbacks = [cb for cb in trainer.callbacks if cb is not finder and cb is not ending]


def _skipped(trainer: Trainer, tuner: str) -> bool:
    """Under fast_dev_run a tuner does not run (it says so, in Lightning's words)."""
    if trainer.fast_dev_run:
        warn(f"Skipping {tuner} since `fast_dev_run` is enabled.")
    return bool(trainer.fast_dev_run)


class _StageBatchSizeFinder(BatchSizeFinder):
    """The Tuner's finder: it may search in validate/test/predict too, since the Tuner ends the stage
    right after the search (the stage's own loaders are never used)."""

    searches_in_evaluation = True


def _check_loaders(train: Any, val: Any, dataloaders: Any, method: str) -> None:
    """Lightning's checks of the method and of which loaders it takes (ValueError / MisconfigurationError)."""
    if method not in METHODS:
        raise MisconfigurationError(f"Tuner: method {method!r} is invalid. Should be one of {METHODS}.")
    if method == "fit" and dataloaders is not None:
        raise MisconfigurationError(
            "Tuner(method='fit') takes no `dataloaders` (they are for validate/test/predict); "
            "please consider setting `train_dataloaders` and `val_dataloaders` instead."
        )
    if method != "fit" and (train is not None or val is not None):
        raise MisconfigurationError(
            f"Tuner(method={method!r}) takes no `train_dataloaders` or `val_dataloaders`; "
            "please consider setting `dataloaders` instead."
        )


def _refuse_configured(trainer: Trainer, kind: type) -> None:
    if any(isinstance(cb, kind) for cb in trainer.callbacks):
        raise MisconfigurationError(
            f"Trainer is already configured with a `{kind.__name__}` callback; please remove it if you want to "
            "use the Tuner."
        )


__all__ = ["TunedAttributeError", "Tuner"]
