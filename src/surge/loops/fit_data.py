"""fit()'s loaders, asked for where Lightning asks for them.

The val loaders inside the sanity check (after `on_sanity_check_start`, with the RNG isolated as
the rest of it), or when training starts if there is no sanity check; the train loader after the
sanity check, or earlier when something needs it first (`estimated_stepping_batches` in
`configure_optimizers`; a tuner that decides the batch or the learning rates before the optimizers
exist). The val loaders are not asked for where nothing would run them (`limit_val_batches=0`, no
`validation_step`), as in Lightning."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from ..callbacks.base import overrides
from ..data import as_loader_list, is_single_loader, limit_batches
from ..data.stage_data import NO_TRAIN_DATA, fit_train_loader, loaders_defined, stage_source
from ..errors import MisconfigurationError
from ..module import Module
from ..rank_zero import warn
from ..seed import rng_untouched
from ..tune.setup import Tuned, tune_loaders, tune_val_loaders
from .reload import loader_reload
from .validation import BatchPlan, plan_batches

if TYPE_CHECKING:
    from ..config import TrainerConfig
    from ..data.stage_data import LoaderPreparation
    from ..tune.setup import Tuning
    from .fit import FitLoop
    from .validation import Validation


@dataclass
class FitData:
    """Where fit's loaders come from; the train loader once asked for (tuned, prepared), what the
    tuners decided for it, and the batch plan."""

    model: Module
    datamodule: Any
    given: tuple[Any, Any]  # fit()'s train_dataloaders= and val_dataloaders=
    prep: LoaderPreparation
    tuning: Tuning
    cfg: TrainerConfig
    train: Iterable | None = None
    tuned: Tuned | None = None
    val_single: bool = False  # one val loader was given, not a sequence (`trainer.val_dataloaders`)

    def __post_init__(self) -> None:
        if not loaders_defined(self.given[0], "train_dataloader", self.datamodule, self.model):
            raise MisconfigurationError(NO_TRAIN_DATA)  # now, before any work (as Lightning)
        has_step = overrides(self.model, Module, "validation_step")
        defined = loaders_defined(self.given[1], "val_dataloader", self.datamodule, self.model)
        if defined and not has_step:
            warn("You passed in a `val_dataloader` but have no `validation_step`. Skipping val loop.")
        self.validates = defined and has_step and self.cfg.limit_val_batches != 0  # enable_validation

    def ask_train(self) -> Tuned:
        """The train loader asked for, tuned and prepared (`train`, once); what the tuners decided."""
        if self.tuned is None:
            found = fit_train_loader(self.given[0], self.datamodule, self.model)
            self.tuned = tune_loaders(self.tuning, self.model, found, self.given[0] is not None)
            self.train = self.prep.prepare(self.tuned.train, train=True)
        return self.tuned

    def ask_vals(self) -> list[Iterable]:
        """The val loaders, asked for and prepared ([] where nothing would run them)."""
        if not self.validates:
            return []
        raw, arg = stage_source(
            self.given[1], "val_dataloader", self.datamodule, self.model, "val_dataloaders"
        )
        self.val_single, found = is_single_loader(raw), as_loader_list(raw, arg)
        return [self.prep.prepare(v, fitting=True) for v in tune_val_loaders(self.tuning, found)]

    def plan(self, vals: list[Iterable] | None) -> BatchPlan:
        """The batches per epoch of the train loader and `vals` (None: not asked for yet)."""
        cfg, train = self.cfg, self.ask_train() and self.train
        plan = plan_batches(
            cast(Iterable, train),
            vals or [],
            cfg.limit_train_batches,
            cfg.limit_val_batches,
            cfg.val_check_interval,
            across_epochs=cfg.check_val_every_n_epoch is None,
        )
        return plan if vals is not None else replace(plan, val=[])

    def val_limits(self, vals: list[Iterable]) -> list[int | float]:
        return [limit_batches(v, self.cfg.limit_val_batches, "limit_val_batches") for v in vals]

    def attach(self, loop: FitLoop, validation: Validation, on_plan: Callable[[BatchPlan], None]) -> None:
        """The loop's `num_workers="auto"` tuning and its reloads, from the loaders as asked for."""
        tuned, train = self.tuned, self.train
        assert tuned is not None and train is not None, "the train loader is asked for first"
        if tuned.auto_workers is not None:
            loop.auto_workers = tuned.auto_workers(train, validation.loaders, prepare=self.prep.adjust)
        given = (self.given[0] is not None, self.given[1] is not None)
        source = (self.model, self.datamodule, given)
        loop.reload = loader_reload(self.cfg, loop, validation, source, self.prep, tuned.train, on_plan)


def sanity_check(
    steps: int, data: FitData, validation: Callable[[], Validation], hooks: Any, flag: Callable[[bool], None]
) -> None:
    """Validate `steps` batches per loader (-1: all; 0: no sanity check) before training, between
    the sanity-check hooks, with `flag(True)` meanwhile (the Trainer's `sanity_checking`); the val
    loaders are asked for inside it. The global RNG is left as it was."""
    if steps == 0 or not data.validates:
        return
    with rng_untouched():
        flag(True)
        hooks.callbacks("on_sanity_check_start")
        try:
            runs = validation()
            limits = runs.sanity_limits(steps)
            if limits:
                runs.run(limits, sanity=True)
        finally:
            flag(False)
        hooks.callbacks("on_sanity_check_end")
