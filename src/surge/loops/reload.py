"""`reload_dataloaders_every_n_epochs=n`: fit's loaders requested again from the datamodule or the
module, and made ready as at fit's start (tuned, prepared for this process, planned).

Lightning's rule: the train loader at the start of each epoch where `epoch - last request >= n`,
the val loaders likewise when validation runs. A loader passed to fit() is kept (Lightning hands
the same object back). A resumed run requests its loaders again for the epoch it resumes in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from torch.utils.data import DataLoader

from ..data import limit_batches, stop_persistent_workers
from ..data.stage_data import stage_loaders
from ..data.stateful_loader import check_train_loader
from ..errors import CheckpointError, MisconfigurationError
from ..rank_zero import info
from ..seed import rng_untouched, set_rng_state
from ..tune.loaders import with_batch_size, with_workers
from .validation import BatchPlan, plan_batches

if TYPE_CHECKING:
    from ..config import TrainerConfig
    from ..data.stage_data import LoaderPreparation
    from ..module import Module
    from .fit import FitLoop
    from .validation import Validation


@dataclass(frozen=True)
class LoaderSource:
    """Where fit's loaders come from and how a new one is made ready, handed down at fit's setup."""

    every_n_epochs: int
    model: Module
    datamodule: Any
    given: tuple[bool, bool]  # (train, val) loaders passed to fit(): kept, never requested
    prep: LoaderPreparation
    limits: tuple[int | float, int | float, int | float]  # limit_train/val_batches, val_check_interval
    batch_size: int | None  # the micro-batch effective_batch_size chose, for every new train loader
    num_workers: int | str | None  # Trainer(num_workers=): an int, or "auto" (keeps the count chosen)
    on_plan: Callable[[BatchPlan], None]  # the Trainer's record of the batches per epoch

    def train(self) -> list[Iterable]:
        return stage_loaders(None, "train_dataloader", self.datamodule, self.model, "train_dataloaders")

    def vals(self) -> list[Iterable]:
        return stage_loaders(None, "val_dataloader", self.datamodule, self.model, "val_dataloaders")

    def workers(self, current: Any) -> int | None:
        """The worker count a new loader gets: the tuned one (None: the loader's own)."""
        if self.num_workers == "auto":
            return getattr(current, "num_workers", None)
        return self.num_workers if isinstance(self.num_workers, int) else None

    def ready(self, loader: Any, current: Any, train: bool) -> Iterable:
        """`loader` with the tuned settings of the one it replaces, prepared for this process."""
        if train and self.batch_size is not None and getattr(loader, "batch_size", None) != self.batch_size:
            loader = with_batch_size(loader, self.batch_size)
        count = self.workers(current)
        if count is not None and isinstance(loader, DataLoader) and loader.num_workers != count:
            loader = with_workers(loader, count, persistent_workers=count > 0)
        return self.prep.prepare(loader, train=train, fitting=True)


class LoaderReload:
    """When fit's loaders are requested again, and swapping them in: the loop's train loader and
    batches per epoch, validation's loaders and plan. Once per epoch, never per step."""

    def __init__(self, source: LoaderSource, loop: FitLoop, validation: Validation) -> None:
        self.source, self.loop, self.validation = source, loop, validation
        self.train_at: float = loop.epoch  # fit's start requested the loaders at this epoch
        self.val_at: float = -math.inf
        self.started = False
        validation.before_run = self.before_validation

    def at_epoch_start(self) -> None:
        """Before the epoch's start hooks: a new train loader when due; on a resumed run's first
        epoch, requested for that epoch (val loaders at its first validation)."""
        loop, n = self.loop, self.source.every_n_epochs
        epoch, first = loop.epoch, not self.started
        self.started = True
        resumed = first and epoch != self.train_at
        if first and not resumed and self.validation.due(epoch):
            self.val_at = epoch  # fit's start requested them for this epoch's validation
        if resumed or epoch - self.train_at >= n:
            self.train_at = epoch
            if not self.source.given[0]:
                self._swap_train(self._request_train(epoch))
        if first:
            self._check_resume_position()

    def _request_train(self, epoch: int) -> Iterable:
        with rng_untouched():  # the request moves no training random stream (mid-epoch resumes alike)
            if self.loop._resume_rng is not None:
                set_rng_state(self.loop._resume_rng)  # as the epoch's start, where the first run asked
            found = self.source.train()
        if len(found) != 1:
            raise MisconfigurationError(
                f"reload_dataloaders_every_n_epochs={self.source.every_n_epochs}: train_dataloader() "
                f"returned {len(found)} loaders at epoch {epoch}; return one."
            )
        return found[0]

    def _swap_train(self, loader: Iterable) -> None:
        loop, src = self.loop, self.source
        ctx = loop._context()
        new = src.ready(loader, loop.train_loader, train=True)
        plan = plan_batches(new, self.validation.loaders, *src.limits)
        if loop.auto_workers is not None:
            info("num_workers='auto': the train dataloader was requested again before a count was chosen; "
                 f"it keeps num_workers={getattr(new, 'num_workers', 0)}")  # fmt: skip
            loop.auto_workers = None
        stop_persistent_workers([loop.train_loader])
        loop.train_loader = check_train_loader(new, say=False)  # said at fit start
        loop.ctx = replace(ctx, settings=replace(ctx.settings, batches_per_epoch=plan.train))
        self._use_plan(plan)

    def _check_resume_position(self) -> None:
        """A resume inside an epoch continues only if the epoch's loader has the batches it stopped after."""
        loop = self.loop
        n = loop._context().settings.batches_per_epoch
        if loop.batches_done > n:
            raise CheckpointError(
                f"the checkpoint stopped after batch {loop.batches_done} of epoch {loop.epoch}, but the train "
                f"dataloader requested for that epoch has {n} batches: resume with the data it was saved with"
            )

    def before_validation(self) -> None:
        """Before validation inside fit (not the sanity check): new val loaders when due."""
        epoch = self.loop.epoch
        if epoch - self.val_at < self.source.every_n_epochs:
            return
        self.val_at = epoch
        if self.source.given[1]:
            return
        with rng_untouched():
            found = self.source.vals()
        old = self.validation.loaders
        current = old[0] if old else self.loop.train_loader
        new = [self.source.ready(v, current, train=False) for v in found]
        limit = self.source.limits[1]
        plan = replace(self.validation.plan, val=[limit_batches(v, limit, "limit_val_batches") for v in new])
        stop_persistent_workers(old)
        self.validation.loaders = new
        self._use_plan(plan)

    def _use_plan(self, plan: BatchPlan) -> None:
        self.validation.plan = plan
        self.source.on_plan(plan)


def loader_reload(
    cfg: TrainerConfig,
    loop: FitLoop,
    validation: Validation,
    data: tuple[Module, Any, tuple[bool, bool]],
    prep: LoaderPreparation,
    tuned_train: Any,
    on_plan: Callable[[BatchPlan], None],
) -> LoaderReload | None:
    """The reload a fit with `reload_dataloaders_every_n_epochs > 0` runs (None: loaders kept).

    `data`: the module, the datamodule, and whether the train/val loaders were passed to fit();
    `tuned_train`: the train loader the tuners returned (its batch size is effective_batch_size's).
    """
    n = cfg.reload_dataloaders_every_n_epochs
    if not n:
        return None
    batch = getattr(tuned_train, "batch_size", None) if cfg.effective_batch_size is not None else None
    limits = (cfg.limit_train_batches, cfg.limit_val_batches, cfg.val_check_interval)
    source = LoaderSource(n, *data, prep, limits, batch, cfg.num_workers, on_plan)
    return LoaderReload(source, loop, validation)
