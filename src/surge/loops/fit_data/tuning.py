"""What the Trainer's tuning arguments do at setup: effective_batch_size, num_workers, scale_lr.

Called by `Trainer.fit` before the first step; each says what it chose (rank zero).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from torch.optim import Optimizer
from torch.utils.data import DataLoader

from ...data import loader_length
from ...data.combined import CombinedLoader
from ...errors import MisconfigurationError
from ...module import Module
from ...optim.rates import scale_rates
from ...rank_zero import info
from ...tune.loaders import loader_batch_size, with_batch_size, with_workers

if TYPE_CHECKING:
    from ...arguments import TrainerConfig
    from ...callbacks.batch_size_finder import BatchSizeFinder
    from ...optim import SchedulerConfig
    from ...strategies import Strategy
    from ...trainer import Trainer
    from ...tune.auto_workers import AutoWorkers


@dataclass(frozen=True)
class Tuning:
    """What the tuning arguments need from the Trainer, handed down at fit's setup."""

    effective_batch_size: int | None
    num_workers: int | str | None
    accumulate_grad_batches: int
    fit_batches: Callable[[Any], int | float]  # train batches this process loads, for a loader
    strategy: Strategy
    cuda: bool
    processes_per_node: int
    trainer: Trainer  # for the batch-size search's trial steps (its public device and precision)

    @classmethod
    def of(
        cls, cfg: TrainerConfig, strategy: Strategy, accelerator: str, devices: int, trainer: Trainer
    ) -> Tuning:
        """From the Trainer's validated arguments, its strategy, accelerator name and device count."""
        world, replicas = strategy.world_size, strategy.data_parallel_size
        return cls(
            effective_batch_size=cfg.effective_batch_size,
            num_workers=cfg.num_workers,
            accumulate_grad_batches=cfg.accumulate_grad_batches,
            fit_batches=lambda loader: fit_batches(loader, cfg, replicas),
            strategy=strategy,
            cuda=accelerator == "cuda",
            processes_per_node=max(1, devices) if world > 1 else 1,
            trainer=trainer,
        )


@dataclass(frozen=True)
class Tuned:
    """The tuners' decisions: the loaders to use, the accumulation, and `num_workers="auto"`'s
    `AutoWorkers` factory (called with the prepared loaders) or None; `vals_now`: a batch-size
    search ran, after which Lightning asks for the val loaders too (they take the size found)."""

    train: Iterable
    accumulate_grad_batches: int
    auto_workers: Callable[..., AutoWorkers] | None = None
    vals_now: bool = False


def tune_loaders(tuning: Tuning, model: Module, train: Iterable, given: bool = False) -> Tuned:
    """Apply a `BatchSizeFinder` callback, `effective_batch_size` (micro-batch and accumulation) and
    `num_workers` to the train loader; `given`: it was passed to fit(), not from a hook."""
    accumulate, auto = tuning.accumulate_grad_batches, None
    if isinstance(train, CombinedLoader):
        return Tuned(_tune_combined(tuning, train), accumulate)
    finder = _batch_size_finder(tuning.trainer)
    if finder is not None:
        train = finder.tune_train_loader(tuning.trainer, model, train, given)
    if tuning.effective_batch_size is not None:
        train, accumulate = plan_effective_batch(tuning, model, train, tuning.effective_batch_size)
    if tuning.num_workers == "auto":
        train, auto = _auto_workers(tuning, train)
    elif isinstance(tuning.num_workers, int):  # (TrainerConfig allows only None, "auto" or an int)
        _need_dataloader(train, tuning.num_workers)
        train = with_workers(
            cast(DataLoader, train), tuning.num_workers, persistent_workers=tuning.num_workers > 0
        )
    return Tuned(train, accumulate, auto, vals_now=finder is not None)


def _tune_combined(tuning: Tuning, train: CombinedLoader) -> CombinedLoader:
    """A CombinedLoader's loaders with `num_workers=<int>` each; the tuners that choose one batch
    size or worker count for the train loader are refused by name."""
    found = "a BatchSizeFinder callback" if _batch_size_finder(tuning.trainer) is not None else None
    if tuning.effective_batch_size is not None:
        found = f"effective_batch_size={tuning.effective_batch_size}"
    if tuning.num_workers == "auto":
        found = 'num_workers="auto"'
    if found is not None:
        raise MisconfigurationError(
            f"{found} tunes one train DataLoader, but the train data is a CombinedLoader of "
            f"{len(train.flattened)} loaders: set batch_size and num_workers on each DataLoader instead."
        )
    return tune_val_loaders(tuning, [train])[0]  # type: ignore[return-value]


def needs_train_first(tuning: Tuning, scale_lr: str | None) -> bool:
    """Whether a tuner decides the batch, the accumulation or the rates before the optimizers exist,
    or reads the train loader when fit starts (`LearningRateFinder`): the train loader is then asked
    for before `configure_optimizers`."""
    from ...callbacks.lr_finder import LearningRateFinder

    return (
        _batch_size_finder(tuning.trainer) is not None
        or any(isinstance(cb, LearningRateFinder) for cb in tuning.trainer.callbacks)
        or tuning.effective_batch_size is not None
        or (scale_lr is not None)
    )


def tune_val_loaders(tuning: Tuning, vals: list[Iterable]) -> list[Iterable]:
    """`num_workers=<int>` for the val loaders (DataLoaders; others are kept)."""
    count = tuning.num_workers
    if not isinstance(count, int):
        return vals
    persistent = count > 0

    def tuned(v: Any) -> Any:
        if isinstance(v, CombinedLoader):
            return v.with_loaders([tuned(x) for x in v.flattened])
        return with_workers(v, count, persistent_workers=persistent) if isinstance(v, DataLoader) else v

    return [tuned(v) for v in vals]


def _batch_size_finder(trainer: Trainer) -> BatchSizeFinder | None:
    finder = sys.modules.get("surge.callbacks.batch_size_finder")  # not imported: none was made
    if finder is None:
        return None
    return next((cb for cb in trainer.callbacks if isinstance(cb, finder.BatchSizeFinder)), None)


def plan_effective_batch(tuning: Tuning, model: Module, loader: Any, effective: int) -> tuple[Iterable, int]:
    """The train loader re-created with the micro-batch, and the accumulation that reaches `effective`.

    micro = min(largest batch that fits, effective / world_size); accumulation =
    ceil(effective / (micro * world_size)); the micro-batch is then evened out to
    ceil(effective / (accumulation * world_size)), which fits too and comes closest to `effective`.
    On CUDA the largest batch that fits is searched (rank zero's result is used by every rank);
    elsewhere memory is rarely what limits the batch, so the loader's own batch size is the cap.
    """
    current = loader_batch_size(loader, "effective_batch_size's train dataloader")
    world = tuning.strategy.data_parallel_size  # the processes that read batches of their own
    per_rank = math.ceil(effective / world)
    fits = current
    if tuning.cuda:
        from ...tune.batch_size import find_batch_size  # (the tuners: imported when asked for)

        fits = find_batch_size(model, loader, trainer=tuning.trainer, max_batch_size=per_rank, verbose=False)
        if tuning.strategy.world_size > 1:
            fits = tuning.strategy.broadcast(fits)
    accumulate = math.ceil(effective / (min(fits, per_rank) * world))
    micro = math.ceil(effective / (accumulate * world))
    on = f" on each of {world} processes" if world > 1 else ""
    actual = micro * accumulate * world
    exact = "" if actual == effective else f" (effective batch {actual}, the closest above {effective})"
    steps = "accumulation step" if accumulate == 1 else "accumulation steps"
    info(f"effective_batch_size={effective}: micro-batch {micro} fits{on}, so {accumulate} {steps}{exact}")
    return (loader if micro == current else with_batch_size(loader, micro)), accumulate


def _auto_workers(tuning: Tuning, train: Any) -> tuple[Iterable, Callable[..., AutoWorkers] | None]:
    from ...tune.auto_workers import AutoWorkers, too_short  # (imported when asked for)
    from ...tune.workers import cpu_count

    _need_dataloader(train, "auto")
    batches = tuning.fit_batches(train)
    if too_short(batches):
        info(
            f"num_workers='auto': the fit loads only {batches} batches, too few to time; "
            f"the loader keeps num_workers={train.num_workers}"
        )
        return train, None
    cpus = max(1, cpu_count() // tuning.processes_per_node)
    return AutoWorkers.start_loader(train), partial(AutoWorkers, fit_batches=batches, max_workers=cpus)


def _need_dataloader(train: Any, setting: int | str) -> None:
    if not isinstance(train, DataLoader):
        raise MisconfigurationError(
            f"num_workers={setting!r} re-creates the train DataLoader, but it is a {type(train).__name__}; "
            "pass a torch DataLoader or leave num_workers=None."
        )


def fit_batches(loader: Any, cfg: TrainerConfig, world_size: int) -> int | float:
    """Train batches this process will load in the fit (math.inf when unbounded or unknown).

    From the loader's length (its share under a distributed sampler), `limit_train_batches`,
    `max_epochs` and `max_steps` x accumulation; a resumed fit loads fewer.
    """
    length = loader_length(loader)
    if length is not None and world_size > 1 and cfg.use_distributed_sampler:
        length = math.ceil(length / world_size)
    limit = cfg.limit_train_batches
    per_epoch: int | float
    if isinstance(limit, int):
        per_epoch = limit if length is None else min(limit, length)
    else:
        per_epoch = math.inf if length is None else int(length * limit)
    max_epochs = cfg.max_epochs
    epochs = max_epochs if max_epochs >= 0 else math.inf
    total = per_epoch * epochs if per_epoch else 0
    if cfg.max_steps >= 0:
        total = min(total, cfg.max_steps * cfg.accumulate_grad_batches)
    return total


def scale_learning_rates(
    optimizers: list[Optimizer],
    schedulers: list[SchedulerConfig],
    train_loader: Any,
    micro_batches_per_step: int,
    cfg: TrainerConfig,
) -> float:
    """Scale every param group's rate (and the schedulers' base rates) by the batch ratio; the factor.

    `micro_batches_per_step` is the accumulation times the world size.
    """
    micro = loader_batch_size(train_loader, "scale_lr's train dataloader")
    effective = micro * micro_batches_per_step
    ratio = effective / cast(int, cfg.reference_batch_size)  # TrainerConfig: given with scale_lr
    factor = ratio if cfg.scale_lr == "linear" else math.sqrt(ratio)
    before = optimizers[0].param_groups[0]["lr"]
    scale_rates(optimizers, [config.scheduler for config in schedulers], factor)
    info(
        f"scale_lr={cfg.scale_lr!r}: effective batch {effective} / reference {cfg.reference_batch_size} -> "
        f"learning rates x{factor:.4g} (lr {before:.4g} -> {optimizers[0].param_groups[0]['lr']:.4g})"
    )
    return factor
