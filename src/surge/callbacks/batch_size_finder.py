"""`BatchSizeFinder`: the largest batch that fits, found when fit starts and applied as Lightning
does: the batch-size attribute is set and the train loader is re-created from the hook."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import MisconfigurationError, bad_value
from ..rank_zero import info
from ..tune.batch_size import trial_fits
from ..tune.batch_size_search import SearchLimits, first_size, search_batch_size
from ..tune.loaders import loader_batch_size
from ..tune.memory import available_ram
from ..tune.trial import trial_target
from .base import Callback
from .tuned_attr import get_tuned_attr, has_tuned_attr, set_tuned_attr, warn_if_held_twice

if TYPE_CHECKING:
    from ..datamodule import DataModule
    from ..trainer import Trainer

MODES = ("power", "binsearch")
_EVALUATION = {
    "validate": ("val", "validation_step"),
    "test": ("test", "test_step"),
    "predict": ("predict", "predict_step"),
}


def check_margin(margin: Any, max_val: Any) -> tuple[float, int]:
    """Lightning's `margin` (a fraction in [0, 1)) and `max_val` (the largest batch size, an int >= 1)."""
    if isinstance(margin, bool) or not isinstance(margin, int | float) or not 0.0 <= margin < 1.0:
        raise bad_value("BatchSizeFinder(margin)", margin, "a float in [0.0, 1.0)")
    if isinstance(max_val, bool) or not isinstance(max_val, int) or max_val < 1:
        raise bad_value("BatchSizeFinder(max_val)", max_val, "an int >= 1")
    return float(margin), max_val


class BatchSizeFinder(Callback):
    """The search of Lightning's `BatchSizeFinder` (`batch_size_search`: the sizes tried, when it
    stops, its messages): `mode="power"` doubles from `init_val` while a batch fits, at most
    `max_trials` trials; `"binsearch"` then bisects between the last fit and the first miss and
    takes `margin` off. It stops at the dataset's length or `max_val`. A trial runs
    `steps_per_trial` real training steps (`surge.tune.batch_size.trial_fits`): it misses on an
    out-of-memory error, and on the CPU when it needs over half of the available RAM.

    It runs in fit's setup, before the loaders are prepared (where Lightning runs it, in
    `on_fit_start`, the loaders are not built yet either): it sets `batch_arg_name` on the module,
    its hparams and the datamodule, and fit uses what `train_dataloader()` returns then. Like
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
            raise MisconfigurationError(
                f"BatchSizeFinder(mode={mode!r}): `mode` should be either of {MODES}."
            )
        for name, value, least in (
            ("steps_per_trial", steps_per_trial, 1),
            ("init_val", init_val, 1),
            ("max_trials", max_trials, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise bad_value(f"BatchSizeFinder({name})", value, f"an int >= {least}")
        self._mode, self._steps_per_trial, self._init_val = mode, steps_per_trial, init_val
        self._max_trials, self._batch_arg_name = max_trials, batch_arg_name
        self._margin, self._max_val = check_margin(margin, max_val)
        self.optimal_batch_size: int | None = init_val
        self._evaluation_loader: Any = None  # validate/test/predict: the stage's loader, taken in setup

    searches_in_evaluation = False  # Lightning's Tuner(method="validate"/"test"/"predict") sets it

    def setup(self, trainer: Trainer, pl_module: Any, stage: str | None = None) -> None:
        """Refuse what the search cannot do before any data is read (as Lightning's)."""
        if trainer.world_size > 1:
            raise MisconfigurationError("The Batch size finder is not supported with distributed strategies.")
        if stage != "fit" and not self.searches_in_evaluation:
            raise MisconfigurationError(
                f"BatchSizeFinder in {stage}(): surge searches the batch size when fit starts and cannot re-create "
                f"the loaders of a running {stage}(); use Tuner(trainer).scale_batch_size(model, method={stage!r}) "
                "before it."
            )
        if stage in _EVALUATION:
            self._evaluation_loader = self._stage_loader(trainer.datamodule, pl_module, stage)
        if not has_tuned_attr(pl_module, trainer.datamodule, self._batch_arg_name):
            raise MisconfigurationError(
                f"BatchSizeFinder(batch_arg_name={self._batch_arg_name!r}): field {self._batch_arg_name} not found "
                f"in `model` ({type(pl_module).__name__}), `datamodule`, nor their `hparams` attributes."
            )
        warn_if_held_twice(pl_module, self._batch_arg_name)
        if type(self).on_fit_start is not BatchSizeFinder.on_fit_start:
            raise MisconfigurationError(
                f"{type(self).__name__} overrides on_fit_start; surge runs the batch-size search once, when fit "
                "starts, and cannot re-create the loaders later in a fit."
            )

    def tune_train_loader(self, trainer: Trainer, module: Any, loader: Any, given: bool) -> Any:
        """Find the batch size with `loader`, set it, and return `train_dataloader()`'s new loader."""
        if given:
            raise MisconfigurationError(
                "The Batch size finder cannot be used with dataloaders passed directly to fit(): BatchSizeFinder "
                "re-creates the train loader from train_dataloader(); define it on the module or datamodule."
            )
        self._search(trainer, module, loader, "training_step")
        return _source(trainer.datamodule, module).train_dataloader()

    def _search(self, trainer: Trainer, module: Any, loader: Any, step: str) -> None:
        datamodule = trainer.datamodule
        current = get_tuned_attr(module, datamodule, self._batch_arg_name)
        limits = SearchLimits(self._max_trials, self._max_val, _dataset_length(loader))
        start = first_size(self._init_val, current if isinstance(current, int) else None, limits)
        target = trial_target(trainer)
        budget = None if target.device.type == "cuda" else available_ram() // 2
        loader_batch_size(loader)
        steps = self._steps_per_trial
        found = search_batch_size(
            lambda b: trial_fits(module, target, loader, b, steps, budget, step), start, self._mode, limits,
            self._margin,
        )  # fmt: skip
        self.optimal_batch_size = found
        set_tuned_attr(module, datamodule, self._batch_arg_name, found)
        info(f"Finished batch size finder, will continue with full run using batch size {found}")

    def _stage_loader(self, datamodule: DataModule | None, module: Any, stage: str) -> Any:
        """The loader of evaluation `stage`, from its hook; more than one is refused (as Lightning)."""
        prefix = _EVALUATION[stage][0]
        loaders = getattr(_source(datamodule, module), f"{prefix}_dataloader")()
        if isinstance(loaders, list | tuple):
            if len(loaders) > 1:
                raise MisconfigurationError(
                    f"The Batch size finder cannot be used with multiple {prefix} dataloaders "
                    f"({len(loaders)} from {prefix}_dataloader())."
                )
            loaders = loaders[0]
        return loaders

    def _search_evaluation(self, trainer: Trainer, module: Any, stage: str) -> None:
        """The search on the stage's loader, taken in `setup` (with `searches_in_evaluation`)."""
        if trainer.state.fn != stage or trainer.sanity_checking:
            return
        self._search(trainer, module, self._evaluation_loader, _EVALUATION[stage][1])

    def on_validation_start(self, trainer: Trainer, pl_module: Any) -> None:
        self._search_evaluation(trainer, pl_module, "validate")

    def on_test_start(self, trainer: Trainer, pl_module: Any) -> None:
        self._search_evaluation(trainer, pl_module, "test")

    def on_predict_start(self, trainer: Trainer, pl_module: Any) -> None:
        self._search_evaluation(trainer, pl_module, "predict")

    def on_fit_start(self, trainer: Trainer, module: Any) -> None:
        """Nothing: the search ran in fit's setup (see the class docstring)."""


def _dataset_length(loader: Any) -> int | None:
    try:
        return len(loader.dataset)
    except TypeError:  # an IterableDataset without a length
        return None


def _source(datamodule: DataModule | None, module: Any) -> Any:
    return datamodule if datamodule is not None else module
