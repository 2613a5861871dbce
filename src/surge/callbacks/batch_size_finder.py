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


def check_margin(margin: Any, max_val: Any) -> tuple[float, int]:
    """Lightning's `margin` (a fraction in [0, 1)) and `max_val` (the largest batch size, an int >= 1)."""
    if isinstance(margin, bool) or not isinstance(margin, int | float) or not 0.0 <= margin < 1.0:
        raise bad_value("BatchSizeFinder(margin)", margin, "a float in [0.0, 1.0)")
    if isinstance(max_val, bool) or not isinstance(max_val, int) or max_val < 1:
        raise bad_value("BatchSizeFinder(max_val)", max_val, "an int >= 1")
    return float(margin), max_val


def settle(found: int, mode: str, init_val: int, margin: float) -> int:
    """The batch size a search that found `found` fitting settles on, as Lightning's: `"power"`, the
    largest `init_val * 2**k` that fits; `"binsearch"`, `found` less the `margin` (at least 1)."""
    if mode == "power":
        power = init_val
        while power * 2 <= found:
            power *= 2
        return min(power, found)
    return max(1, int(found * (1 - margin))) if margin > 0 else found


class BatchSizeFinder(Callback):
    """`mode="power"` keeps doubling from `init_val` while a batch fits; `"binsearch"` then
    searches between the last fit and the first miss. Each trial runs `steps_per_trial` real
    training steps (`surge.tune.find_batch_size`: out of memory on CUDA; on the CPU, over half of
    the available RAM); at most `max_trials`, and never above the dataset's length or `max_val`.
    `"binsearch"` then takes `margin` (a fraction) off what fits, as Lightning's.

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
        margin: float = 0.05,
        max_val: int = 8192,
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
        self._margin, self._max_val = check_margin(margin, max_val)
        self.optimal_batch_size: int | None = init_val

    def tune_train_loader(self, trainer: Any, module: Any, loader: Any, given: bool) -> Any:
        """Find the batch size with `loader`, set it, and return `train_dataloader()`'s new loader."""
        self._check(trainer, module, given)
        found = find_batch_size(
            module, loader, trainer=trainer, init=self._init_val, max_trials=self._max_trials,
            steps=self._steps_per_trial, verbose=False, max_batch_size=self._max_val,
        )  # fmt: skip
        found = settle(found, self._mode, self._init_val, self._margin)
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
