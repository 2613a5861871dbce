"""`lightning.pytorch.tuner.Tuner`: Lightning's `Tuner(trainer).lr_find(...)` and
`.scale_batch_size(...)` on surge's tuners (`surge.tune.lr_find`, `surge.tune.find_batch_size`).

As in Lightning, the tuned value is set where the module keeps it (an attribute, a key of its
`hparams`, or the same on the datamodule); the loader is the one passed, else the datamodule's (after
its `prepare_data()` and `setup("fit")`), else the module's `train_dataloader()`. Unlike Lightning,
which runs the search inside a `trainer.fit()` it cuts short, surge runs it outside any stage: no
`fit` hooks run and `trainer.state` is left as it was. `val_dataloaders` are accepted and not used:
the search runs training steps only (Lightning's suggestion reads only the training loss)."""

from __future__ import annotations

from typing import Any

from ..callbacks.batch_size_finder import check_margin, settle
from ..callbacks.tuned_attr import has_tuned_attr, set_tuned_attr
from ..datamodule import DataModule
from ..errors import MisconfigurationError, SurgeError, bad_value
from ..module import Module
from ..rank_zero import info, warn
from ..trainer import Trainer
from ..tune.batch_size import find_batch_size
from ..tune.lr_finder import MODES, LRFinderResult
from ..tune.lr_finder import lr_find as range_test
from ..tune.trial import train_loader

BATCH_MODES = ("power", "binsearch")


class TunedAttributeError(SurgeError, AttributeError):
    """The attribute a tuner sets is not on the module, its hparams or the datamodule (Lightning's
    AttributeError)."""


class Tuner:
    """Runs surge's tuners with `trainer`'s device and precision."""

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
    ) -> LRFinderResult | None:
        """The learning-rate range test; with `update_attr`, the suggested rate is set on `attr_name`
        (default: the module's `lr` or `learning_rate`). Skipped (None) under fast_dev_run, as in Lightning."""
        _check_method(method, dataloaders)
        if self._trainer.fast_dev_run:
            warn("Skipping learning rate finder since `fast_dev_run` is enabled.")
            return None
        if mode not in MODES:
            raise bad_value("Tuner.lr_find(mode)", mode, f"one of {MODES}")
        attr = _attr(model, datamodule, attr_name, ("lr", "learning_rate"), "lr_find") if update_attr else ""
        loader = _train_loader(model, train_dataloaders, datamodule)
        result = range_test(
            model, loader, trainer=self._trainer, min_lr=min_lr, max_lr=max_lr, num_training=num_training,
            mode=mode, early_stop_threshold=early_stop_threshold,
        )  # fmt: skip
        lr = result.suggestion()
        if attr and lr is not None:
            set_tuned_attr(model, datamodule, attr, lr)
            info(f"Learning rate set to {lr}")
        return result

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
        """The largest batch that fits (`mode="power"`: the largest `init_val * 2**k`; `"binsearch"`:
        then searched between, less `margin`; never above `max_val`), set on `batch_arg_name`; the loader is re-created from
        `train_dataloader()`, as Lightning does, so loaders passed in are refused. Skipped (None) under
        fast_dev_run, as in Lightning."""
        _check_method(method, dataloaders)
        if self._trainer.fast_dev_run:
            warn("Skipping batch size scaler since `fast_dev_run` is enabled.")
            return None
        if mode not in BATCH_MODES:
            raise bad_value("Tuner.scale_batch_size(mode)", mode, f"one of {BATCH_MODES}")
        if train_dataloaders is not None:
            raise MisconfigurationError(
                "Tuner.scale_batch_size re-creates the train loader from train_dataloader(), so it cannot use "
                "train_dataloaders=; define train_dataloader() on the module or datamodule."
            )
        margin, max_val = check_margin(margin, max_val)
        attr = _attr(model, datamodule, batch_arg_name, (batch_arg_name,), "scale_batch_size")
        loader = _train_loader(model, None, datamodule)
        found = find_batch_size(
            model, loader, trainer=self._trainer, init=init_val, max_trials=max_trials, steps=steps_per_trial,
            verbose=False, max_batch_size=max_val,
        )  # fmt: skip
        found = settle(found, mode, init_val, margin)
        set_tuned_attr(model, datamodule, attr, found)
        info(f"Finished batch size finder, will continue with full run using batch size {found}")
        return found


def _check_method(method: str, dataloaders: Any) -> None:
    if method != "fit":
        raise bad_value("Tuner(method)", method, '"fit" (surge tunes on the training data only)')
    if dataloaders is not None:
        raise MisconfigurationError(
            "Tuner: dataloaders= is for method='validate'/'test'/'predict'; use train_dataloaders=."
        )


def _attr(model: Module, datamodule: Any, given: str, names: tuple[str, ...], tuner: str) -> str:
    for name in (given,) if given else names:
        if has_tuned_attr(model, datamodule, name):
            return name
    wanted = given or " or ".join(names)
    raise TunedAttributeError(
        f"Tuner.{tuner}: {type(model).__name__} has no `{wanted}` (nor its hparams or the datamodule); "
        "add it, or name another attribute."
    )


def _train_loader(model: Module, given: Any, datamodule: DataModule | None) -> Any:
    if given is None and datamodule is not None:
        datamodule.prepare_data()
        datamodule.setup("fit")
        return datamodule.train_dataloader()
    return train_loader(model, given, "Tuner")


__all__ = ["Tuner"]
