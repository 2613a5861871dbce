"""`reload_dataloaders_every_n_epochs=n`: when fit's loaders are requested again, and how a new one is
made ready as at fit's start (the tuned micro-batch and worker count, prepared for this process).

Lightning's rule: the train loader at the start of each epoch where `epoch - last request >= n`,
the val loaders likewise when validation runs. A loader passed to fit() is kept (Lightning hands
the same object back). A resumed run requests its loaders again for the epoch it resumes in.
`FitData` asks this schedule and swaps the loaders in; nothing else sees it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torch.utils.data import DataLoader

from ...data.combined import CombinedLoader, inner_loaders
from ...data.combined_stage import prepared
from ...errors import MisconfigurationError
from ...seed import rng_untouched, set_rng_state
from ...tune.loaders import with_batch_size, with_workers
from ..stage_data import eval_found, fit_train_loader, stage_source

if TYPE_CHECKING:
    from ...arguments import TrainerConfig
    from ...module import Module
    from ..stage_data import LoaderPreparation


@dataclass(frozen=True)
class NewLoaders:
    """Where a requested-again loader comes from and the settings every new loader gets."""

    every_n_epochs: int
    model: Module
    datamodule: Any
    prep: LoaderPreparation
    batch_size: int | None  # the micro-batch effective_batch_size chose, for every new train loader
    num_workers: int | str | None  # Trainer(num_workers=): an int, or "auto" (keeps the count chosen)
    limit_train_batches: int | float

    def train(self, epoch: int, resume_rng: dict[str, Any] | None) -> Iterable:
        """The module's or datamodule's train loader, requested for `epoch` without moving training's
        random streams (a mid-epoch resume asks with the RNG of the epoch's start, as the first run did)."""
        with rng_untouched():
            if resume_rng is not None:
                set_rng_state(resume_rng)
            try:
                return fit_train_loader(None, self.datamodule, self.model)
            except MisconfigurationError as err:
                raise MisconfigurationError(
                    f"reload_dataloaders_every_n_epochs={self.every_n_epochs}: train_dataloader() at epoch {epoch}: {err}"
                ) from err

    def vals(self) -> list[Iterable]:
        """The val loaders requested again (a CombinedLoader, or a dict of loaders combined, as one)."""
        with rng_untouched():
            raw, arg = stage_source(None, "val_dataloader", self.datamodule, self.model, "val_dataloaders")
            return eval_found(raw, arg, "validate")[0]

    def ready(self, loader: Any, current: Any, train: bool) -> Iterable:
        """`loader` with the tuned settings of the one it replaces, prepared for this process (a
        CombinedLoader: each of its loaders; for training, its batches under `limit_train_batches`)."""
        if isinstance(loader, CombinedLoader):
            combined = loader.with_loaders([self._tuned(x, current, train) for x in loader.flattened])
            if train:
                return self.prep.train(combined, self.limit_train_batches)
            return prepared(combined, lambda x: self.prep.prepare(x, fitting=True))
        return self.prep.prepare(self._tuned(loader, current, train), train=train, fitting=True)

    def _tuned(self, loader: Any, current: Any, train: bool) -> Any:
        current = inner_loaders(current)[0]
        if train and self.batch_size is not None and getattr(loader, "batch_size", None) != self.batch_size:
            loader = with_batch_size(loader, self.batch_size)
        count = self._workers(current)
        if count is not None and isinstance(loader, DataLoader) and loader.num_workers != count:
            loader = with_workers(loader, count, persistent_workers=count > 0)
        return loader

    def _workers(self, current: Any) -> int | None:
        """The worker count a new loader gets: the tuned one (None: the loader's own)."""
        if self.num_workers == "auto":
            return getattr(current, "num_workers", None)
        return self.num_workers if isinstance(self.num_workers, int) else None


class ReloadSchedule:
    """The epochs at which the train and val loaders were last requested, and whether one is due."""

    def __init__(self, every_n_epochs: int, given: tuple[bool, bool], epoch: int) -> None:
        self.every_n_epochs, self.given = every_n_epochs, given  # given: passed to fit(), never requested
        self.train_at: float = epoch  # fit's start requested the loaders at this epoch
        self.val_at: float = -math.inf

    def train_due(self, epoch: int, first: bool, validates_now: bool) -> bool:
        """At an epoch's start: whether to request the train loader (on a resumed run's first epoch:
        for that epoch). Records the request."""
        resumed = first and epoch != self.train_at
        if first and not resumed and validates_now:
            self.val_at = epoch  # fit's start requested them for this epoch's validation
        if not (resumed or epoch - self.train_at >= self.every_n_epochs):
            return False
        self.train_at = epoch
        return not self.given[0]

    def vals_due(self, epoch: int) -> bool:
        """Before validation inside fit: whether to request the val loaders. Records the request."""
        if epoch - self.val_at < self.every_n_epochs:
            return False
        self.val_at = epoch
        return not self.given[1]


def schedule(cfg: TrainerConfig, given: tuple[bool, bool], epoch: int) -> ReloadSchedule | None:
    """The schedule of a fit with `reload_dataloaders_every_n_epochs > 0` (None: loaders kept)."""
    n = cfg.reload_dataloaders_every_n_epochs
    return ReloadSchedule(n, given, epoch) if n else None
