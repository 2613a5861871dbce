"""How the stages run a `CombinedLoader` (or a collection of loaders, which they combine as
Lightning does): each loader is prepared for this process as a single loader would be (workers,
pinning, its distributed share), into a new CombinedLoader (the user's is left as it is), with
`limit_*_batches` applied to each loader. Training runs its combined batches (`CombinedBatches`);
evaluation runs a `sequential` one as its loaders one after the other (each with its
`dataloader_idx`), the other modes as one loader of combined batches."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from torch.utils.data import DataLoader

from ..errors import MisconfigurationError
from .combined import CombinedLoader, sized_length

TRAIN_MODES = ("min_size", "max_size_cycle", "max_size")


def as_combined(raw: Any, mode: str) -> CombinedLoader | None:
    """`raw` as a CombinedLoader: itself, or a dict, list or tuple of loaders combined in `mode`
    (Lightning's default for the stage); None for a single loader or None."""
    if isinstance(raw, CombinedLoader):
        return raw
    if isinstance(raw, Mapping | list | tuple) and not isinstance(raw, DataLoader):
        return CombinedLoader(raw, mode)
    return None


def check_train_mode(combined: CombinedLoader) -> CombinedLoader:
    """Training reads its loaders together: `sequential` is refused, as Lightning refuses it."""
    if combined.mode == "sequential":
        raise MisconfigurationError(
            '`fit()` does not support the `CombinedLoader(mode="sequential")` mode for training. The available '
            f"modes are: {list(TRAIN_MODES)}; train on the loaders one after the other with one fit() each."
        )
    return combined


def prepared(combined: CombinedLoader, prepare: Callable[[Any], Any]) -> CombinedLoader:
    """A new CombinedLoader of the same shape and mode over each loader made ready by `prepare`."""
    return combined.with_loaders([prepare(x) for x in combined.flattened])


def per_loader_limits(combined: CombinedLoader, limit: int | float, arg: str) -> list[int | float]:
    """`limit_*_batches` applied to each of its loaders, as to a single loader."""
    from . import limit_batches

    return [limit_batches(x, limit, arg) for x in combined.flattened]


class CombinedBatches:
    """What a loop iterates for a CombinedLoader: the combined batches alone, at most its length
    under the stage's limits (its loaders are not read past that, as a loop stops at its end)."""

    def __init__(self, combined: CombinedLoader, limits: list[int | float]) -> None:
        self.combined = combined
        combined.limits = limits
        self.per_loader = limits  # `trainer.num_val_batches` shows these
        self.limited_batches = combined.length()  # `limit_batches` takes this as it is

    def __len__(self) -> int:
        if self.limited_batches == float("inf"):
            raise TypeError("a loader of this CombinedLoader has no length")
        return int(self.limited_batches)

    def __iter__(self) -> Iterator[Any]:
        return _Capped(iter(self.combined), self.limited_batches)


class _Capped:
    def __init__(self, combined: CombinedLoader, n: int | float) -> None:
        self.combined, self.left = combined, n

    def __iter__(self) -> _Capped:
        return self

    def __next__(self) -> Any:
        if self.left <= 0:
            raise StopIteration
        self.left -= 1
        return next(self.combined)[0]


def train_batches(combined: CombinedLoader, limit: int | float) -> CombinedBatches:
    """The fit's train batches: `limit_train_batches` on each loader."""
    return CombinedBatches(combined, per_loader_limits(combined, limit, "limit_train_batches"))


def eval_runs(
    combined: CombinedLoader, limit: int | float, arg: str
) -> tuple[list[Iterable], list[int | float], list[int | float]]:
    """What an evaluation runs for `combined` (loaders, each run as one), the batches each runs,
    and each of the combined loaders' batch limit (`trainer.num_val_batches`, as Lightning's)."""
    limits = per_loader_limits(combined, limit, arg)
    if combined.mode == "sequential":
        combined.limits = limits
        return list(combined.flattened), limits, limits
    batches = CombinedBatches(combined, limits)
    return [batches], [batches.limited_batches], limits


def combined_inexact_reason(batches: CombinedBatches) -> str | None:
    """Why a checkpoint inside an epoch of `batches` cannot resume its data exactly, or None.

    A resume reads the combined loaders again from the epoch's start, with the random state of that
    start, and drops the batches already trained on. That gives the same batches unless a loader
    keeps a position of its own (not saved here), persistent workers run on across epochs, or, in
    `max_size_cycle`, a loader starts over inside the epoch drawing its order (or its workers' seed)
    from torch's global random state, which training has moved on by then.
    """
    from torch.utils.data import RandomSampler

    from .dataset_rng import draws_random_numbers
    from .stateful_loader import state_holder

    combined = batches.combined
    for i, loader in enumerate(combined.flattened):
        if state_holder(loader) is not None:
            return (
                f"the CombinedLoader's loader {i} keeps its own position (state_dict), which surge does not "
                "save inside a CombinedLoader: a resume inside an epoch reads its loaders again from the "
                "epoch's start"
            )
        if not isinstance(loader, DataLoader):
            continue
        if loader.num_workers > 0 and loader.persistent_workers:
            return (
                f"the CombinedLoader's loader {i} has persistent_workers=True: a resume in a later epoch "
                "starts its workers again, which draws from the random state the uninterrupted run did not"
            )
        cycles = combined.mode == "max_size_cycle" and sized_length(loader) < batches.limited_batches
        sampler = loader.sampler
        global_order = isinstance(sampler, RandomSampler) and sampler.generator is None
        global_workers = loader.num_workers > 0 and draws_random_numbers(loader.dataset)
        if cycles and loader.generator is None and (global_order or global_workers):
            return (
                f"in max_size_cycle mode the CombinedLoader's loader {i} starts over inside the epoch, drawing "
                "its order from torch's global random state, which training moves: after a resume past that "
                "point it is read in another order. Give it its own DataLoader(generator=torch.Generator()"
                ".manual_seed(...)) to resume exactly"
            )
    return None
