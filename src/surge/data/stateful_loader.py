"""Train loaders that keep their own position: saved at each save point, restored on resume.

A loader with `state_dict()`/`load_state_dict()` (torchdata's `StatefulDataLoader`, or any iterable
of batches that has them), or a DataLoader loading in its own process an IterableDataset that has
them, is saved in each checkpoint as of the last batch trained on (each rank's, under several
processes), and a resumed fit continues at the next sample. Other IterableDatasets keep surge's
best effort: a resume inside an epoch reads the epoch's stream again and drops what was trained on.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset

from ..checkpoint.values import checked_value
from ..errors import CheckpointError, MisconfigurationError
from ..rank_zero import info, warn
from ..seed import rng_state, set_rng_state
from .loader_state import set_generator_states


def state_holder(loader: Any) -> Any | None:
    """What holds the train loader's position: the loader itself, its dataset, or None."""
    if _has_state(loader):
        return loader
    dataset = getattr(loader, "dataset", None)
    if isinstance(loader, DataLoader) and isinstance(dataset, IterableDataset) and _has_state(dataset):
        return dataset
    return None


def _has_state(obj: Any) -> bool:
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


def loader_class(loader: DataLoader) -> tuple[type[DataLoader], dict[str, Any]]:
    """The class to re-create `loader` with, and the arguments of its own a copy keeps: a
    StatefulDataLoader stays one (re-created as a plain DataLoader, it would lose its state)."""
    if not is_torchdata_loader(loader):
        return DataLoader, {}
    own = {name: getattr(loader, name) for name in ("snapshot_every_n_steps", "in_order")}
    return sys.modules["torchdata.stateful_dataloader"].StatefulDataLoader, own


def is_torchdata_loader(loader: Any) -> bool:
    """Whether `loader` is torchdata's StatefulDataLoader (torchdata is not imported for this)."""
    module = sys.modules.get("torchdata.stateful_dataloader")
    return module is not None and isinstance(loader, module.StatefulDataLoader)


def check_train_loader(loader: Iterable, say: bool = True) -> Iterable:
    """`loader`, after refusing a dataset whose state its workers would hide, and saying (`say`) how
    an IterableDataset without state resumes (each of a CombinedLoader's loaders)."""
    from .combined import inner_loaders

    for inner in inner_loaders(loader):
        _check_one(inner, say)
    return loader


def _check_one(loader: Iterable, say: bool) -> None:
    holder = state_holder(loader)
    dataset = getattr(loader, "dataset", None)
    name, workers = type(dataset).__name__, getattr(loader, "num_workers", 0)
    if holder is not None and holder is dataset and workers > 0:
        raise MisconfigurationError(
            f"the train DataLoader loads its {name} (an IterableDataset with state_dict/load_state_dict) in "
            f"num_workers={workers} worker processes, whose copies of the dataset advance, not this "
            "one: its state_dict() cannot say where the stream stands. Use torchdata's StatefulDataLoader "
            "(pip install torchdata), which gathers the workers' states, or num_workers=0."
        )
    if say and isinstance(dataset, IterableDataset) and not _has_state(dataset) and holder is None:
        info(
            f"the train dataset ({name}) is an IterableDataset without state_dict/load_state_dict: a resume "
            "inside an epoch reads the epoch's stream again from its start and drops the batches already "
            "trained on (exact when the stream repeats given the same random state). Give the dataset "
            "state_dict/load_state_dict, or use torchdata's StatefulDataLoader, to continue at the next "
            "sample."
        )


def loader_position(loader: Any) -> Any | None:
    """The train loader's position now (None when it keeps none): what a fit stopped inside an epoch
    keeps, since the end of its stage drops a StatefulDataLoader's iterator, and with it the position."""
    holder = state_holder(loader)
    return None if holder is None else holder.state_dict()


def loader_states(loader: Any, strategy: Any, kept: Any | None = None) -> list[Any] | None:
    """Every rank's train loader position, by rank (None when the loader keeps none); all ranks call this.
    `kept`: the position `loader_position` took where the fit stopped, else the loader's own now."""
    holder = state_holder(loader)
    if holder is None:
        return None
    where = f"checkpoint['loop']['loader_states'][{strategy.global_rank}]"
    state = checked_value(
        holder.state_dict() if kept is None else kept, where, f"{type(holder).__name__}.state_dict()"
    )  # numpy scalars
    return strategy.all_gather_object(state)


@dataclass(frozen=True)
class LoaderResume:
    """A train loader position to continue from, inside an epoch."""

    state: Any
    generators: list[Tensor] | None  # the loader's own generators as they stood at the save
    path: Path  # the checkpoint it came from

    def iterator(self, loader: Any) -> Iterator[Any]:
        """`loader` continuing after the last batch trained on (empty when the epoch's batches ran out)."""
        finished = isinstance(self.state, Mapping) and bool(self.state.get("_iterator_finished"))
        it = _apply(loader, self.state, finished, self.path)
        if self.generators is not None:
            set_generator_states(loader, self.generators)
        return iter(()) if finished else it


def restore_loader(
    loader: Any, loop: Mapping[str, Any], strategy: Any, path: Path, batches_per_epoch: int | float = math.inf
) -> LoaderResume | None:
    """This rank's saved train loader position: restored now when the epoch had ended (call this before the
    loop's own restore, which puts the loader's generators back), else returned for the loop to continue
    from. None: the loop resumes as it does a loader without state. A position that claims its iterator
    ran out before the epoch's last batch is refused (resumed, it would skip the rest of the epoch)."""
    saved, holder = loop.get("loader_states"), state_holder(loader)
    if saved is None or holder is None:
        _say_unmatched(saved, holder, loader, loop, path)
        return None
    world = strategy.world_size
    if not isinstance(saved, list) or len(saved) != world:
        count = len(saved) if isinstance(saved, list) else saved
        warn(
            f"{path} holds the train loader positions of {count} processes, this run has {world}: the "
            "loader starts its epoch over (batches already trained on in it are read again and dropped)"
        )
        return None
    state = saved[strategy.global_rank]
    if is_torchdata_loader(loader):
        _check_counts(state, f"loop['loader_states'][{strategy.global_rank}]", path)
    if loop["epoch_done"]:
        _apply(loader, state, True, path)
        return None
    finished = isinstance(state, Mapping) and bool(state.get("_iterator_finished"))
    if finished and loop["batches_done"] < batches_per_epoch:
        raise CheckpointError(
            f"{path}: the train loader's saved position (loop['loader_states'][{strategy.global_rank}]) says "
            f"its iterator finished ('_iterator_finished': True) after batch {loop['batches_done']} of epoch "
            f"{loop['epoch']}, but this run's epoch has {batches_per_epoch} batches: resumed, the rest of the "
            "epoch would be skipped. The checkpoint is damaged or was written with another loader; resume "
            "from another checkpoint, or with the loader it was saved with"
        )
    return LoaderResume(state, loop.get("generators"), path)


_COUNTS = ("_num_yielded", "_sampler_iter_yielded", "samples_yielded", "_snapshot_step")  # torchdata's


def _check_counts(state: Any, where: str, path: Path) -> None:
    """A StatefulDataLoader reads its counts only when its iterator first steps (a wrong type is a raw
    TypeError there): refuse a count that is not a non-negative int now, naming the key."""
    if not isinstance(state, Mapping):
        return
    for key, value in state.items():
        if key in _COUNTS and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise CheckpointError(
                f"{path}: the train loader's saved position {where}[{key!r}] is {value!r}, not a count "
                "(an int >= 0): the checkpoint is damaged; resume from another checkpoint"
            )
        _check_counts(value, f"{where}[{key!r}]", path)


def _apply(loader: Any, state: Any, discard: bool, path: Path) -> Iterator[Any]:
    """Load `state` into the loader (or its dataset) and start the iterator that continues from it; with
    `discard`, a StatefulDataLoader's next iteration starts a new epoch. The run's RNG is left as it
    stands (starting an iterator draws its workers' seed; the saved one is used)."""
    now = rng_state()
    try:
        holder = state_holder(loader)
        assert holder is not None, "restore_loader checked the loader"
        try:
            holder.load_state_dict(state)
            if discard and not is_torchdata_loader(loader):
                return iter(())  # the loader (or dataset) starts its next epoch from the state it now holds
            it = iter(loader)  # a StatefulDataLoader restores its dataset's state here (its workers', too)
        except (KeyError, IndexError, TypeError, ValueError, AssertionError) as err:
            raise CheckpointError(
                f"{path}: the train loader's saved position does not fit this run's {type(holder).__name__} "
                f"({type(err).__name__}: {err}); resume with the loader the checkpoint was saved with"
            ) from err
        if discard:
            loader.load_state_dict({})  # its next iteration starts a new epoch
        return it
    finally:
        set_rng_state(now)


def _say_unmatched(saved: Any, holder: Any, loader: Any, loop: Mapping[str, Any], path: Path) -> None:
    if saved is not None and holder is None:
        raise CheckpointError(
            f"{path} holds the position of a train loader with state_dict/load_state_dict, but this run's "
            f"train loader ({type(loader).__name__}) has none: resume with the loader it was saved with"
        )
    if saved is None and holder is not None and not loop["epoch_done"] and loop["batches_done"]:
        warn(
            f"{path} holds no position of the train loader (it was saved by a run whose loader had no "
            f"state_dict): this run's {type(holder).__name__} is resumed by reading the epoch again up to "
            f"batch {loop['batches_done']}"
        )
