"""`FitData`: the one owner of what a fit's data is and what it changes to.

It holds the loader sources (given loaders, the datamodule or the module's hooks), the tuners'
decisions (`Tuned`: micro-batch, accumulation, `num_workers="auto"`), the loaders as prepared for
this process, the batch plan and the accumulation. Everything that changes them happens in its own
methods: `for_epoch` at an epoch's start (reload when due, the resumed loader position),
`batches` (the epoch's iterator), `for_validation` (val loaders requested again), `end_epoch` (the
auto-workers switch), `set_accumulation` (a `GradientAccumulationScheduler`). Others read it.

Loaders are asked for where Lightning asks: the val loaders inside the sanity check (after
`on_sanity_check_start`, with the RNG isolated as the rest of it), or when training starts if there
is no sanity check; the train loader after the sanity check, or earlier when something needs it
first (`estimated_stepping_batches` in `configure_optimizers`; a tuner that decides the batch or the
learning rates before the optimizers exist). The val loaders are not asked for where nothing would
run them (`limit_val_batches=0`, no `validation_step`), as in Lightning.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from time import perf_counter
from typing import TYPE_CHECKING, Any

from ...callbacks.base import overrides
from ...data import (
    data_wait_advice,
    iter_without_worker_seed_draw,
    limit_batches,
    loader_length,
    loader_state,
    resume_iterator,
    starts_workers,
    stop_persistent_workers,
)
from ...data.combined import CombinedLoader, inner_loaders
from ...data.combined_stage import CombinedBatches, combined_inexact_reason, eval_runs
from ...data.loader_state import inexact_resume_reason
from ...data.look_ahead import one_ahead
from ...data.stateful_loader import LoaderResume, check_train_loader, restore_loader, state_holder
from ...errors import CheckpointError, MisconfigurationError, bad_value
from ...module import Module
from ...rank_zero import info, warn
from ..stage_data import NO_TRAIN_DATA, eval_found, fit_train_loader, loaders_defined, stage_source
from ..validation import BatchPlan, plan_batches
from .reload import NewLoaders, ReloadSchedule, schedule
from .tuning import Tuned, tune_loaders, tune_val_loaders

if TYPE_CHECKING:
    from ...arguments import TrainerConfig
    from ...strategies import Strategy
    from ...tune.auto_workers import AutoWorkers
    from ..stage_data import LoaderPreparation
    from .tuning import Tuning


ADVICE_AFTER_BATCHES = 50  # batches the loop's data-wait share is measured over, once a fit


@dataclass(frozen=True)
class FitSources:
    """Where fit's loaders come from and how they are made ready, fixed for the fit."""

    model: Module
    datamodule: Any
    given: tuple[Any, Any]  # fit()'s train_dataloaders= and val_dataloaders=
    prep: LoaderPreparation
    tuning: Tuning
    cfg: TrainerConfig


@dataclass(frozen=True)
class EpochData:
    """What one epoch trains on: the train loader and the batch plan (both fixed for the epoch)."""

    train: Iterable
    plan: BatchPlan


class FitData:
    """The fit's loaders, tuned decisions, batch plan and accumulation (see the module doc)."""

    def __init__(
        self, model: Module, datamodule: Any, given: tuple[Any, Any], prep: LoaderPreparation,
        tuning: Tuning, cfg: TrainerConfig,
    ) -> None:  # fmt: skip
        self.sources = FitSources(model, datamodule, given, prep, tuning, cfg)
        if not loaders_defined(given[0], "train_dataloader", datamodule, model):
            raise MisconfigurationError(NO_TRAIN_DATA)  # now, before any work (as Lightning)
        self.has_val_step = overrides(model, Module, "validation_step")
        defined = loaders_defined(given[1], "val_dataloader", datamodule, model)
        if defined and not self.has_val_step:
            warn("You passed in a `val_dataloader` but have no `validation_step`. Skipping val loop.")
        self.validates = defined and self.has_val_step and cfg.limit_val_batches != 0  # enable_validation
        self.tuned: Tuned | None = None  # the tuners' decisions, once the train loader is asked for
        self.train: Iterable | None = None
        self.vals: list[Iterable] | None = None  # None: not asked for yet
        self.val_single = False  # one val loader was given, not a sequence (`trainer.val_dataloaders`)
        self.val_combined: tuple[Any, list[int | float]] | None = None  # a CombinedLoader's: as given, limits
        self.val_enabled = False  # validation runs (a step, loaders and batches), once they are asked for
        self.plan = BatchPlan(0, [], 0)
        self.accumulate = cfg.accumulate_grad_batches  # a tuner or a callback may decide another
        self.window = self.accumulate  # the current epoch's accumulation, fixed at its start
        self.auto: AutoWorkers | None = None  # num_workers="auto", until its first epoch ends
        self.reload: ReloadSchedule | None = None
        self.resume_at: LoaderResume | None = None  # a loader that keeps its own position, resumed
        self.end_position: Any = None  # the train loader's position where the fit stopped inside an epoch
        self.advised = self.inexact_said = False
        self._pace_from: tuple[float, float] | None = None  # the data-wait clock and the time, at batch 1

    # -- asked for where Lightning asks ------------------------------------------------------
    def ask_train(self) -> Tuned:
        """The train loader asked for, tuned and prepared (once); what the tuners decided."""
        if self.tuned is None:
            src = self.sources
            found = fit_train_loader(src.given[0], src.datamodule, src.model)
            self.tuned = tuned = tune_loaders(src.tuning, src.model, found, src.given[0] is not None)
            self.train = src.prep.train(tuned.train, src.cfg.limit_train_batches)
            self.accumulate = tuned.accumulate_grad_batches
            self.plan = replace(self._plan_of(self.train, []), val=self.plan.val)
            if tuned.vals_now:  # so `trainer.val_dataloaders` is set after a Tuner's search, too
                self.ask_vals()
        return self.tuned

    def ask_vals(self) -> list[Iterable]:
        """The val loaders, asked for and prepared once ([] where nothing would run them)."""
        if self.vals is None:
            self.vals = self._first_vals() if self.validates else []
            self.plan = replace(self.plan, val=self._val_limits(self.vals))
            self.val_enabled = self.has_val_step and bool(self.vals) and sum(self.plan.val) > 0
        return self.vals

    def _first_vals(self) -> list[Iterable]:
        src = self.sources
        raw, arg = stage_source(src.given[1], "val_dataloader", src.datamodule, src.model, "val_dataloaders")
        found, self.val_single = eval_found(raw, arg, "validate")
        runs = src.prep.evaluation(
            tune_val_loaders(src.tuning, found),
            self.val_single,
            src.cfg.limit_val_batches,
            "limit_val_batches",
            True,
        )
        combined = bool(found) and isinstance(found[0], CombinedLoader)
        self.val_combined = (runs.given, runs.reported) if combined else None
        return runs.loaders

    def start(self, epoch: int) -> Iterable:
        """When training starts: both asked for, the batch plan checked, the auto-workers tuning and
        the reload schedule set up from the loaders as asked for. Returns the train loader."""
        self.ask_train()
        vals, train = self.ask_vals(), check_train_loader(self._train())
        self.plan = self._plan_of(train, vals)
        tuned, src = self.tuned, self.sources
        assert tuned is not None
        if tuned.auto_workers is not None:
            self.auto = tuned.auto_workers(train, vals, prepare=src.prep.adjust)
        self.reload = schedule(src.cfg, (src.given[0] is not None, src.given[1] is not None), epoch)
        self.advised = self.inexact_said = False
        return train

    # -- one epoch -------------------------------------------------------------------------
    def for_epoch(self, epoch: int, batches_done: int, resume_rng: dict[str, Any] | None,
                  first: bool, validates_now: bool) -> EpochData:  # fmt: skip
        """Before the epoch's start hooks: a new train loader when due (`first`: the fit's first
        epoch, resumed at `batches_done` with `resume_rng` as the epoch's start)."""
        reload = self.reload
        if reload is not None and reload.train_due(epoch, first, validates_now):
            self._swap_train(self._new_loaders().train(epoch, resume_rng))
        if first and reload is not None and batches_done > self.plan.train:
            raise CheckpointError(
                f"the checkpoint stopped after batch {batches_done} of epoch {epoch}, but the train "
                f"dataloader requested for that epoch has {self.plan.train} batches: resume with the data it was saved with"
            )
        return EpochData(self._train(), self.plan)

    def start_windows(self) -> int:
        """After the epoch's start hooks (where a callback may set the accumulation): this epoch's."""
        self.window = self.accumulate
        return self.window

    def batches(self, epoch: int, batches_done: int, resume_rng: dict[str, Any] | None,
                epoch_start_rng: dict[str, Any] | None) -> Iterator[Any]:  # fmt: skip
        """The epoch's batch iterator: from a resumed loader's own position, or `batches_done` in
        (replayed from `resume_rng`), or fresh; timed by `num_workers="auto"` in its first epoch."""
        loader, later = self._train(), epoch > 0  # persistent workers start in a run's first epoch
        if self.resume_at is not None:
            it, self.resume_at = self.resume_at.iterator(loader), None
        elif batches_done == 0 and resume_rng is None:
            it = iter_without_worker_seed_draw(loader) if later and starts_workers(loader) else iter(loader)
        else:
            it = resume_iterator(loader, batches_done, resume_rng, later_epoch=later)
        if self.auto is not None:
            it = self.auto.watch(it, batches_done, epoch_start_rng)
            self.advised = True  # the advice to load in workers is what auto acts on
        if loader_length(loader) is None and state_holder(loader) is None:
            # as Lightning reads a loader without a length (a stateful one keeps its exact position)
            it = one_ahead(it)
        return it

    def pace_mark(self, batch_idx: int, measured: bool) -> int:
        """The batch count at which the loop next calls `pace` (-1: never), from an epoch's start at
        `batch_idx`; `measured`: the fit has no report of its own (a profiler's is the advice then)."""
        self._pace_from = None
        return batch_idx + 1 if measured and not self.advised else -1

    def pace(self, batches_done: int, wait_s: float) -> int:
        """Once a fit, whether the loop mostly waited for data, measured over ADVICE_AFTER_BATCHES
        batches after the epoch's first (whose one-off costs, lazy state and a FLOP count, are not
        the loop's pace); `wait_s`: the loop's data-wait clock. Returns the next `pace_mark`."""
        now = perf_counter()
        if self._pace_from is None:
            self._pace_from = (wait_s, now)
            return batches_done + ADVICE_AFTER_BATCHES
        waited, began = self._pace_from
        self.advised = True
        data_wait_advice(self._train(), wait_s - waited, now - began, ADVICE_AFTER_BATCHES)
        return -1

    def end_epoch(self) -> None:
        """After the epoch's batches: `num_workers="auto"` decided, the loaders for the later epochs."""
        if self.auto is not None:
            self.train, self.vals = self.auto.settled()
            self.auto = None

    def stop_at(self, position: Any) -> None:
        """The fit stopped: the train loader's position inside its epoch (None: at an epoch's end)."""
        self.end_position = position

    def for_validation(self, epoch: int) -> tuple[list[Iterable], BatchPlan]:
        """Before validation inside fit (not the sanity check): the val loaders, new ones when due."""
        if self.reload is not None and self.reload.vals_due(epoch):
            old = self.ask_vals()
            current = inner_loaders(old[0] if old else self._train())[0]
            new = [self._new_loaders().ready(v, current, train=False) for v in self._new_loaders().vals()]
            self.val_combined = None
            if new and isinstance(combined := new[0], CombinedLoader):  # each of its loaders made ready
                new, _, reported = eval_runs(
                    combined, self.sources.cfg.limit_val_batches, "limit_val_batches"
                )
                self.val_combined = (combined.iterables, reported)
            stop_persistent_workers(old)
            self.vals, self.plan = new, replace(self.plan, val=self._val_limits(new))
        return self.ask_vals(), self.plan

    def _swap_train(self, loader: Iterable) -> None:
        old = self._train()
        new = self._new_loaders().ready(loader, old, train=True)
        plan = self._plan_of(new, self.ask_vals())
        if self.auto is not None:
            info("num_workers='auto': the train dataloader was requested again before a count was chosen; "
                 f"it keeps num_workers={getattr(new, 'num_workers', 0)}")  # fmt: skip
            self.auto = None
        stop_persistent_workers([old])
        self.train, self.plan = check_train_loader(new, say=False), plan  # said at fit start

    def _new_loaders(self) -> NewLoaders:
        src, tuned = self.sources, self.tuned
        assert self.reload is not None and tuned is not None
        cfg = src.cfg
        batch = getattr(tuned.train, "batch_size", None) if cfg.effective_batch_size is not None else None
        return NewLoaders(
            self.reload.every_n_epochs, src.model, src.datamodule, src.prep, batch, cfg.num_workers,
            cfg.limit_train_batches,
        )  # fmt: skip

    # -- what the others read ----------------------------------------------------------------
    def set_accumulation(self, value: int) -> None:
        """`trainer.accumulate_grad_batches = value` (checked there), used from the next epoch's start."""
        self.accumulate = value

    def train_as_given(self) -> Any:
        """`trainer.train_dataloader`: the train loader, or a CombinedLoader's loaders in the shape given."""
        train = self.train
        return train.combined.iterables if isinstance(train, CombinedBatches) else train

    def loaders(self) -> list[Iterable]:
        """The fit's loaders as they stand (their persistent workers are stopped when it ends)."""
        return [*([self.train] if self.train is not None else []), *(self.vals or [])]

    def val_loaders_as_given(self) -> Any:
        """The val loaders in the shape the user gave them (`trainer.val_dataloaders`, as Lightning):
        the loader itself when one was given, else the list; None when there are none."""
        if not self.vals:
            return None
        if self.val_combined is not None:
            return self.val_combined[0]
        return self.vals[0] if self.val_single else self.vals

    def num_val_batches(self) -> list[int | float]:
        """`trainer.num_val_batches`: [] when this fit sets no val loaders up (no validation_step,
        or limit_val_batches=0), as Lightning."""
        if self.vals is not None and not (self.has_val_step and self.sources.cfg.limit_val_batches != 0):
            return []
        return self.val_combined[1] if self.val_combined is not None else self.plan.val

    def resume_limit(self) -> int | float:
        """The batches a resumed epoch may have done (checked later when its loader is requested again)."""
        return self.plan.train if self.reload is None else math.inf

    # -- state -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The train loader's own generators and its sampler's seed (kept in the loop's entry)."""
        train = self._train()
        return {
            "generators": loader_state.generator_states(train),
            "sampler_seed": loader_state.sampler_seed(train),
        }

    def load_state_dict(self, state: Mapping[str, Any], at_epoch_start: bool) -> None:
        """Back where the saved run's loader stood (its generators only at an epoch's start)."""
        train = self._train()
        if at_epoch_start and state.get("generators") is not None:
            loader_state.set_generator_states(train, state["generators"])
        loader_state.set_sampler_seed(train, state.get("sampler_seed"))

    def resume_position(self, loop: Mapping[str, Any], strategy: Strategy, path: Any) -> None:
        """A loader that keeps its own position continues from the saved one (before `load_state_dict`)."""
        self.resume_at = restore_loader(self._train(), loop, strategy, path, self.resume_limit())

    def say_if_inexact(self) -> None:
        """Once a fit: a checkpoint that cannot resume the data exactly says so when it is written."""
        if not self.inexact_said:
            self.inexact_said = True
            train = self._train()
            if isinstance(train, CombinedBatches):
                reason = combined_inexact_reason(train)
            else:
                reason = inexact_resume_reason(train)
            if reason:
                warn(f"this checkpoint will not resume exactly: {reason}")

    def _train(self) -> Iterable:
        if self.train is None:
            raise bad_value("FitData.train", None, "the train loader asked for first (ask_train)")
        return self.train

    def _plan_of(self, train: Iterable, vals: list[Iterable]) -> BatchPlan:
        cfg = self.sources.cfg
        return plan_batches(
            train, vals, cfg.limit_train_batches, cfg.limit_val_batches, cfg.val_check_interval,
            across_epochs=cfg.check_val_every_n_epoch is None,
        )  # fmt: skip

    def _val_limits(self, vals: list[Iterable]) -> list[int | float]:
        return [limit_batches(v, self.sources.cfg.limit_val_batches, "limit_val_batches") for v in vals]
