"""`BatchSizeFinder`: the largest batch that fits, found when fit starts and applied as Lightning
does: the batch-size attribute is set and the train loader is re-created from the hook."""

from __future__ import annotations

from typing import Any

from ..errors import MisconfigurationError, bad_value
from ..rank_zero import info
from ..tune.batch_size import find_batch_size
from .base import Callback
from .tuned_attr import has_tuned_attr, set_tuned_attr

MODES = ("power", "binsearch")


class BatchSizeFinder(Callback):
    """`mode="power"` keeps doubling from `init_val` while a batch fits; `"binsearch"` then
    searches between the last fit and the first miss. Each trial runs `steps_per_trial` real
    training steps (`surge.tune.find_batch_size`: out of memory on CUDA; on the CPU, over half of
    the available RAM); at most `max_trials`, and never above the dataset's length.

    It runs in fit's setup, before the loaders are prepared (where Lightning runs it, in
    `on_fit_start`, the loaders are not built yet either): it sets `batch_arg_name` on the module,
    its hparams or the datamodule, and fit uses what `train_dataloader()` returns then. Like
    Lightning's, it needs the loader to come from `train_dataloader()` (not passed to `fit()`),
    and one process. The batch size found is `optimal_batch_size`.
    """

    SUPPORTED_MODES = MODES

    def __init__(
        self,
        mode: str = "power",
        steps_per_trial: int = 3,
        init_val: int = 2,
        max_trials: int = 25,
        batch_arg_name: str = "batch_size",
    ) -> None:
        mode = mode.lower() if isinstance(mode, str) else mode
        if mode not in MODES:
            raise bad_value("BatchSizeFinder(mode)", mode, f"one of {MODES}")
        for name, value in (
            ("steps_per_trial", steps_per_trial),
            ("init_val", init_val),
            ("max_trials", max_trials),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise bad_value(f"BatchSizeFinder({name})", value, "an int >= 1")
        self._mode, self._steps_per_trial, self._init_val = mode, steps_per_trial, init_val
        self._max_trials, self._batch_arg_name = max_trials, batch_arg_name
        self.optimal_batch_size: int | None = init_val

    def tune_train_loader(self, trainer: Any, module: Any, loader: Any, given: bool) -> Any:
        """Find the batch size with `loader`, set it, and return `train_dataloader()`'s new loader."""
        self._check(trainer, module, given)
        found = find_batch_size(
            module, loader, trainer=trainer, init=self._init_val, max_trials=self._max_trials,
            steps=self._steps_per_trial, verbose=False,
        )  # fmt: skip
        if self._mode == "power":  # the largest init_val * 2**k that fits
            power = self._init_val
            while power * 2 <= found:
                power *= 2
            found = min(power, found)
        self.optimal_batch_size = found
        set_tuned_attr(module, trainer.datamodule, self._batch_arg_name, found)
        info(f"BatchSizeFinder: {self._batch_arg_name} set to {found} (mode={self._mode!r})")
        source = trainer.datamodule if trainer.datamodule is not None else module
        return source.train_dataloader()

    def _check(self, trainer: Any, module: Any, given: bool) -> None:
        if trainer.world_size > 1:
            raise MisconfigurationError(
                "BatchSizeFinder runs in one process; it does not support distributed strategies."
            )
        if given:
            raise MisconfigurationError(
                "BatchSizeFinder re-creates the train loader from train_dataloader(), so it cannot be used with "
                "loaders passed to fit(); define train_dataloader() on the module or datamodule."
            )
        if not has_tuned_attr(module, trainer.datamodule, self._batch_arg_name):
            raise MisconfigurationError(
                f"BatchSizeFinder(batch_arg_name={self._batch_arg_name!r}): no such attribute on "
                f"{type(module).__name__}, its hparams or the datamodule."
            )
        if type(self).on_fit_start is not BatchSizeFinder.on_fit_start:
            raise MisconfigurationError(
                f"{type(self).__name__} overrides on_fit_start; surge runs the batch-size search once, when fit "
                "starts, and cannot re-create the loaders later in a fit."
            )

    def on_fit_start(self, trainer: Any, module: Any) -> None:
        """Nothing: the search ran in fit's setup (see the class docstring)."""
