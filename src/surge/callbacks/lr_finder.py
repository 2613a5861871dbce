"""`LearningRateFinder`: the learning-rate range test at fit start, its suggestion applied."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..errors import MisconfigurationError, bad_value
from ..rank_zero import info
from ..tune.lr_finder import MODES, LRFinderResult, RangeTest, check_arguments, run_range_test
from ..tune.trial import trial_target
from .base import Callback
from .tuned_attr import TunedAttributeError, has_tuned_attr, set_tuned_attr

if TYPE_CHECKING:
    from ..datamodule import DataModule
    from ..trainer import Trainer


class LearningRateFinder(Callback):
    """In `on_fit_start`, run `surge.tune.lr_find` (the model, optimizers and RNG are restored
    afterwards); with `update_attr`, set the suggested rate on the module's `attr_name` (default:
    `lr` or `learning_rate`, on the module, its hparams or the datamodule) and in every param
    group of the fit's optimizers. The result is `optimal_lr` (`.suggestion()`, `.lrs`, `.losses`;
    in the Lightning mode Lightning's result, `surge.lightning.lr_finder.LRFinder`)."""

    SUPPORTED_MODES = MODES

    def __init__(
        self,
        min_lr: float = 1e-8,
        max_lr: float = 1,
        num_training_steps: int = 100,
        mode: str = "exponential",
        early_stop_threshold: float | None = 4.0,
        update_attr: bool = True,
        attr_name: str = "",
    ) -> None:
        mode = mode.lower() if isinstance(mode, str) else mode
        if mode not in MODES:
            raise bad_value("LearningRateFinder(mode)", mode, f"one of {MODES}")
        check_arguments(min_lr, max_lr, num_training_steps, mode, early_stop_threshold)
        self._min_lr, self._max_lr, self._num_training_steps = min_lr, max_lr, num_training_steps
        self._mode, self._early_stop_threshold = mode, early_stop_threshold
        self._update_attr, self._attr_name = update_attr, attr_name
        self.optimal_lr: RangeTest | None = None

    def _attr(self, datamodule: DataModule | None, module: Any) -> str:
        """The attribute the suggestion goes to; Lightning's AttributeError when there is none."""
        if self._attr_name:
            if not has_tuned_attr(module, datamodule, self._attr_name):
                raise TunedAttributeError(
                    f"LearningRateFinder(attr_name={self._attr_name!r}): the attribute name for the learning rate "
                    f"was set to {self._attr_name}, but could not find this as a field in `model` "
                    f"({type(module).__name__}) or `model.hparams`."
                )
            return self._attr_name
        for name in ("lr", "learning_rate"):
            if has_tuned_attr(module, datamodule, name):
                return name
        raise TunedAttributeError(
            f"LearningRateFinder: either name the learning rate's attribute with `attr_name`, or the model "
            f"({type(module).__name__}) should have one of these fields: ['lr', 'learning_rate'], on itself, "
            "its `hparams` or the datamodule (or pass update_attr=False)."
        )

    def lr_find(self, trainer: Trainer, module: Any) -> None:
        """Run the range test on the fit's train loader and apply the suggestion."""
        if len(trainer.optimizers) > 1:
            raise MisconfigurationError(
                f"`model.configure_optimizers()` returned {len(trainer.optimizers)} optimizers, but the learning "
                "rate finder only works with single optimizer."
            )
        attr = self._attr(trainer.datamodule, module) if self._update_attr else ""
        per_epoch = trainer.num_training_batches
        steps, loader = self._num_training_steps, trainer.train_dataloader
        if isinstance(per_epoch, int) and per_epoch > 0:  # the fit's epochs bound the test, as Lightning's
            loader = _Epochs(loader, per_epoch)
            if trainer.max_epochs >= 0:
                steps = min(steps, per_epoch * trainer.max_epochs)
        test = self._range_test(trainer, steps)
        run_range_test(module, loader, trial_target(trainer), test, steps)
        self.optimal_lr = test
        lr = test.suggestion()
        if not attr or lr is None:
            return
        set_tuned_attr(module, trainer.datamodule, attr, lr)
        for opt in trainer.optimizers:
            for group in opt.param_groups:
                group["lr"] = lr
        info(f"LearningRateFinder: learning rate set to {lr:.4g}")

    def _range_test(self, trainer: Trainer, steps: int) -> RangeTest:
        """The range test to run for `steps` steps: surge's (`LRFinderResult`), its rate spanning them."""
        del trainer
        return LRFinderResult(
            min_lr=self._min_lr, max_lr=self._max_lr, num_training=steps, mode=self._mode,
            early_stop_threshold=self._early_stop_threshold,
        )  # fmt: skip

    def on_fit_start(self, trainer: Trainer, module: Any) -> None:
        self.lr_find(trainer, module)


class _Epochs:
    """The fit's epochs of `loader`: each pass yields its first `per_epoch` batches (limit_train_batches)."""

    def __init__(self, loader: Any, per_epoch: int) -> None:
        self.loader, self.per_epoch = loader, per_epoch

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(iter(self.loader), self.per_epoch)
