"""The Trainer's views of its fit's data and decisions (Lightning's names): a base of `Trainer`
only. Each reads the one owner (`FitData`, the stop request, the sanity flag); the setters a
callback uses (`accumulate_grad_batches`, `should_stop`) go through the owner's method."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import MisconfigurationError, bad_value

if TYPE_CHECKING:
    from ..arguments import TrainerConfig
    from ..loops.control import SanityFlag, StopRequest
    from ..loops.fit import FitLoop
    from ..loops.fit_data import FitData
    from ..loops.validation import Validation
    from ..module import Module


class FitDataViews:
    """`trainer.num_training_batches`, `accumulate_grad_batches`, `should_stop` and the others of the fit."""

    _cfg: TrainerConfig
    _module: Module | None
    _validation: Validation | None
    _fit_data: FitData | None  # fit's loaders, batch plan and accumulation
    _stage_loaders: dict[str, tuple[Any, list[int | float]]]  # validate/test/predict's last: loaders, limits
    _fn: str | None  # the entry point called last
    _stop: StopRequest
    _sanity: SanityFlag
    fit_loop: FitLoop

    @property
    def accumulate_grad_batches(self) -> int:
        """The accumulation in use (`effective_batch_size=` decides it)."""
        data = self._fit_data
        return data.accumulate if data is not None else self._cfg.accumulate_grad_batches

    @accumulate_grad_batches.setter
    def accumulate_grad_batches(self, value: int) -> None:
        """Set by a callback in `on_train_epoch_start` (GradientAccumulationScheduler), read right after."""
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise bad_value("trainer.accumulate_grad_batches", value, "an int >= 1")
        if value != 1 and self._module is not None and not self._module.automatic_optimization:
            raise bad_value(
                "trainer.accumulate_grad_batches", value, "1 with manual optimization (accumulate by hand)"
            )
        if self._fit_data is None:
            raise MisconfigurationError(
                f"trainer.accumulate_grad_batches = {value} before any fit: set it in a callback during the "
                "fit (e.g. on_train_epoch_start), or pass Trainer(accumulate_grad_batches=...)."
            )
        self._fit_data.set_accumulation(value)

    @property
    def should_stop(self) -> bool:
        """Set by a callback (or the user) to stop the fit at the next point it can (as Lightning)."""
        return self._stop.requested

    @should_stop.setter
    def should_stop(self, value: bool) -> None:
        self._stop.set(value)

    @property
    def sanity_checking(self) -> bool:
        """The sanity check runs now."""
        return self._sanity.on

    @sanity_checking.setter
    def sanity_checking(self, value: bool) -> None:
        self._sanity.set(value)

    @property
    def enable_validation(self) -> bool:
        """Whether this fit validates (a validation_step, val data, and batches to run)."""
        return self._fit_data is not None and self._fit_data.val_enabled

    # As Lightning's, the loader properties show the loaders of the entry point called last (fit,
    # validate, test or predict), as they were given; the other stages' are None.
    def _last(self, stage: str) -> Any:
        """validate/test/predict's loaders as given, if it is the entry point called last."""
        return self._stage_loaders[stage][0] if self._fn == stage and stage in self._stage_loaders else None

    @property
    def train_dataloader(self) -> Any:
        return self._fit_data.train_as_given() if self._fit_data is not None and self._fn == "fit" else None

    @property
    def val_dataloaders(self) -> Any:
        if self._fn == "fit":
            return self._fit_data.val_loaders_as_given() if self._fit_data is not None else None
        return self._last("validate")

    @property
    def test_dataloaders(self) -> Any:
        return self._last("test")

    @property
    def predict_dataloaders(self) -> Any:
        return self._last("predict")

    @property
    def num_training_batches(self) -> int | float:
        return self._fit_data.plan.train if self._fit_data is not None else 0

    @property
    def num_val_batches(self) -> list[int | float]:
        """validate()'s batch limits while it runs and after it (the entry point called last), else fit's."""
        if self._fn == "validate" and "validate" in self._stage_loaders:
            return self._stage_loaders["validate"][1]
        return self._fit_data.num_val_batches() if self._fit_data is not None else []

    @property
    def num_test_batches(self) -> list[int | float]:
        """The last test()'s batch limits, one per loader ([] before any)."""
        return self._stage_loaders.get("test", (None, []))[1]

    @property
    def num_predict_batches(self) -> list[int | float]:
        """The last predict()'s batch limits, one per loader ([] before any)."""
        return self._stage_loaders.get("predict", (None, []))[1]

    @property
    def training_rng(self) -> dict[str, Any] | None:
        """Training's RNG state while validation runs inside fit (what a checkpoint then records)."""
        return self._validation.training_rng if self._validation is not None else None

    @property
    def is_last_batch(self) -> bool:
        """The training batch being run is the epoch's last (False for a loader without a length)."""
        loop = self.fit_loop
        return loop.batches_done + (0 if loop.ending else 1) >= self.num_training_batches
