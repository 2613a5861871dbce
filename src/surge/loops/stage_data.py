"""The data a stage runs on: the loaders it was given or asks the datamodule/module for, checked,
and prepared for this process (worker seeding, pinning, the distributed share)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import data as data_mod
from ..callbacks.base import overrides
from ..data.combined import CombinedLoader
from ..data.combined_stage import as_combined, check_train_mode, eval_runs, prepared, train_batches
from ..data.loader_prep import in_order, prepare_loader
from ..datamodule import DataModule
from ..errors import MisconfigurationError, SurgeTypeError
from ..module import Module
from ..module.log_hooks import refusing
from ..seed import last_seeding

if TYPE_CHECKING:
    from ..strategies.base import Strategy

LOADER_HOOKS = {
    "fit": "train_dataloader",
    "validate": "val_dataloader",
    "test": "test_dataloader",
    "predict": "predict_dataloader",
}


def stage_loaders(given: Any, hook: str, datamodule: Any, model: Module, arg: str) -> list[Iterable]:
    """`given` (the `arg=` of fit/validate/...) as a list, else what the datamodule's or the
    module's `hook` returns (one not implemented counts as none); [] when there is nothing."""
    return data_mod.as_loader_list(*stage_source(given, hook, datamodule, model, arg))


def stage_source(given: Any, hook: str, datamodule: Any, model: Module, arg: str) -> tuple[Any, str]:
    """What `stage_loaders` reads, as the user gave it (a loader, a list of them, None), and its
    name for errors."""
    if given is not None:
        return given, arg
    for source in (datamodule, model):
        fn = getattr(source, hook, None) if source is not None else None
        if fn is None:
            continue
        try:
            with refusing(source, hook):  # as Lightning: `self.log` refused in a module's loader hook
                return fn(), f"{type(source).__name__}.{hook}()"
        except NotImplementedError:
            continue
    return None, arg


def fit_train_loader(train: Any, datamodule: Any, model: Module) -> Iterable:
    """fit()'s train loader, from the argument or the hooks: one loader, or a CombinedLoader (a
    collection of loaders is combined in `max_size_cycle` mode, as Lightning combines it)."""
    raw, arg = stage_source(train, "train_dataloader", datamodule, model, "train_dataloaders")
    combined = as_combined(raw, "max_size_cycle")
    if combined is not None:
        for loader in combined.flattened:
            data_mod.as_loader_list(loader, arg)  # each one iterable
        return check_train_mode(combined)
    found = data_mod.as_loader_list(raw, arg)
    if not found:
        raise MisconfigurationError(NO_TRAIN_DATA)
    return found[0]


def loaders_defined(given: Any, hook: str, datamodule: Any, model: Module) -> bool:
    """Whether `stage_loaders` has a user's hook (or given loaders) to ask, without asking it."""
    if given is not None:
        return True
    for source in (datamodule, model):
        fn = getattr(source, hook, None) if source is not None else None
        if fn is not None and getattr(fn, "__func__", fn) is not getattr(DataModule, hook, None):
            return True
    return False


NO_TRAIN_DATA = (
    "fit() has no training data: pass train_dataloaders=, a datamodule=, or define train_dataloader()."
)


def eval_loaders(stage: str, given: Any, datamodule: Any, model: Module) -> tuple[list[Iterable], bool]:
    """validate/test/predict's loaders, from `dataloaders=` or the hooks (at least one), and whether
    they came as one loader rather than a sequence (`trainer.val_dataloaders` gives them as they came)."""
    hook = LOADER_HOOKS[stage]
    raw, arg = stage_source(given, hook, datamodule, model, "dataloaders")
    loaders, single = eval_found(raw, arg, stage)
    if not loaders:
        raise MisconfigurationError(
            f"{stage}() has no data: pass dataloaders=, a datamodule=, or define {hook}()."
        )
    return loaders, single


def eval_found(raw: Any, arg: str, stage: str) -> tuple[list[Iterable], bool]:
    """An evaluation's loaders as given (`raw`, named `arg` in errors), as a list, and whether they
    came as one. A CombinedLoader, or a dict of loaders (combined `sequential`, as Lightning
    combines it), comes as one."""
    if not isinstance(raw, CombinedLoader | Mapping):
        return data_mod.as_loader_list(raw, arg), data_mod.is_single_loader(raw)
    combined = as_combined(raw, "sequential")
    assert combined is not None
    if stage == "predict" and combined.mode != "sequential":
        raise MisconfigurationError(
            '`trainer.predict()` only supports the `CombinedLoader(mode="sequential")` mode.'
        )
    for loader in combined.flattened:
        data_mod.as_loader_list(loader, arg)  # each one iterable
    return [combined], True


def check_step_defined(model: Any, hook: str, stage: str) -> None:
    """`model` is a surge.Module that defines `hook` (e.g. validation_step for validate())."""
    if not isinstance(model, Module):
        raise SurgeTypeError(f"model must be a surge.Module, got {type(model).__name__}")
    if not overrides(model, Module, hook):  # the class's, or one set on the instance (as Lightning accepts)
        raise MisconfigurationError(
            f"{stage}() needs {type(model).__name__}.{hook}(batch, batch_idx) to be defined."
        )


@dataclass(frozen=True)
class EvalRuns:
    """An evaluation's loaders as prepared: what its loop runs, and what the Trainer shows."""

    loaders: list[Iterable]  # each run as one loader (its own `dataloader_idx`)
    limits: list[int | float]  # the batches each runs
    given: Any  # the loaders in the shape they were given (`trainer.val_dataloaders`); None: none
    reported: list[int | float]  # each loader's batch limit (`trainer.num_val_batches`)


@dataclass(frozen=True)
class LoaderPreparation:
    """How this process's loaders are prepared: the user's loader is kept, or re-created where a
    setting must change; under several processes each gets its share (`use_distributed_sampler`)."""

    pin_memory: bool
    global_rank: int
    world_size: int
    distribute: bool
    unshuffle: bool = False  # overfit_batches: the train loader reads its dataset in order

    @classmethod
    def of(cls, cfg: Any, pin_memory: bool, strategy: Strategy) -> LoaderPreparation:
        """The preparation a Trainer's settings (`cfg`, a TrainerConfig) ask for on this process.
        Under a strategy that shares the data (DDP, FSDP) loaders are distributed even on one
        process, as Lightning does (a DistributedSampler of one replica shuffles by the run's seed)."""
        overfit = bool(cfg.overfit_batches)
        shares = strategy.distributed_sampler_kwargs  # a mesh's data-parallel coordinates, or every rank
        distribute = cfg.use_distributed_sampler and (strategy.world_size > 1 or shares is not None)
        rank, size = (
            (shares["rank"], shares["num_replicas"])
            if shares
            else (strategy.global_rank, strategy.world_size)
        )
        return cls(pin_memory, rank, size, distribute, overfit)

    def adjust(self, loader: Any) -> Any:
        """Worker seeding (after `seed_everything(workers=True)`), the workers' signal guard, pinning."""
        seeding = last_seeding()
        return prepare_loader(loader, self.pin_memory, bool(seeding and seeding.workers))

    def evaluation(self, found: list[Iterable], single: bool, limit: int | float, arg: str,
                   fitting: bool = False) -> EvalRuns:  # fmt: skip
        """An evaluation's loaders (`single`: given as one) prepared, and their batch limits (`arg`:
        `limit_val_batches`, ...); a CombinedLoader's loaders each prepared and limited."""
        if len(found) == 1 and isinstance(found[0], CombinedLoader):
            combined = prepared(found[0], lambda x: self.prepare(x, fitting=fitting))
            runs, limits, per_loader = eval_runs(combined, limit, arg)
            return EvalRuns(runs, limits, combined.iterables, per_loader)
        runs = [self.prepare(x, fitting=fitting) for x in found]
        limits = [data_mod.limit_batches(x, limit, arg) for x in runs]
        return EvalRuns(runs, limits, (runs[0] if single else runs) if runs else None, limits)

    def train(self, loader: Iterable, limit: int | float) -> Iterable:
        """What fit's loop iterates for its train loader: `prepare`d, or for a CombinedLoader its
        batches, each of its loaders prepared and limited by `limit` (`limit_train_batches`)."""
        if isinstance(loader, CombinedLoader):
            return train_batches(prepared(loader, lambda x: self.prepare(x, train=True)), limit)
        return self.prepare(loader, train=True)

    def prepare(self, loader: Iterable, train: bool = False, fitting: bool = False) -> Iterable:
        """`adjust`, then this process's share: shuffled by the run's seed for training. Under
        overfit_batches fit's loaders (`train`, or val while `fitting`) read their data in order."""
        loader = self.adjust(loader)
        if self.unshuffle and (train or fitting):
            loader = in_order(loader, "overfit_batches", "train" if train else "val")
        if not self.distribute:
            return loader
        if train:
            seeding = last_seeding()
            seed = seeding.seed if seeding else 0
            return data_mod.distribute_train_loader(loader, self.global_rank, self.world_size, seed)
        return data_mod.distribute_eval_loader(loader, self.global_rank, self.world_size)
