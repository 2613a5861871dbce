"""The random state a DataLoader carries of its own: the generators its sampler and workers draw from.

A user's `DataLoader(generator=g)`, `RandomSampler(generator=g)` or `WeightedRandomSampler(...,
generator=g)` draws from `g`, not from torch's global RNG, so an exact resume must save and
restore `g` too. Generators are found where torch's loaders keep them; any sampler with a
`generator` attribute counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DistributedSampler

from ..errors import CheckpointError
from ..seed import rng_state
from .combined import inner_loaders
from .dataset_rng import draws_random_numbers


def loader_generators(loader: Iterable) -> list[torch.Generator]:
    """The distinct CPU generators of `loader`, its sampler and its batch sampler's sampler (of each
    of a CombinedLoader's loaders, in order)."""
    holders: list[Any] = []
    for inner in inner_loaders(loader):
        batch_sampler = getattr(inner, "batch_sampler", None)
        holders += [
            inner,
            getattr(inner, "sampler", None),
            batch_sampler,
            getattr(batch_sampler, "sampler", None),
        ]
    found: dict[int, torch.Generator] = {}
    for holder in holders:
        gen = getattr(holder, "generator", None)
        if isinstance(gen, torch.Generator) and gen.device.type == "cpu":
            found.setdefault(id(gen), gen)
    return list(found.values())


def generator_states(loader: Iterable | None) -> list[Tensor]:
    """The states of `loader_generators(loader)`, in that order."""
    return [g.get_state() for g in loader_generators(loader)] if loader is not None else []


def set_generator_states(loader: Iterable, states: list[Tensor]) -> None:
    """Restore what `generator_states` captured; the loader must have as many generators."""
    gens = loader_generators(loader)
    if len(gens) != len(states):
        raise CheckpointError(
            f"the checkpoint holds the state of {len(states)} dataloader generator(s), but the train "
            f"DataLoader has {len(gens)}: resume with a loader built like the one that was saved "
            "(the same generator= arguments), or the data order will not continue exactly"
        )
    for gen, state in zip(gens, states):
        gen.set_state(state)


def restore_epoch_start(loader: Iterable, epoch_start: dict[str, Any] | None) -> None:
    """Put the loader's generators back where they stood at the start of an interrupted epoch."""
    if epoch_start is not None and epoch_start.get("generators") is not None:
        set_generator_states(loader, epoch_start["generators"])


def _distributed_samplers(loader: Iterable | None) -> list[DistributedSampler]:
    samplers = [getattr(inner, "sampler", None) for inner in inner_loaders(loader)]
    return [s for s in samplers if isinstance(s, DistributedSampler)]


def sampler_seed(loader: Iterable | None) -> int | None:
    """The seed a DistributedSampler shuffles with (it is taken from `seed_everything` at fit start;
    a CombinedLoader's loaders all have the same)."""
    samplers = _distributed_samplers(loader)
    return int(samplers[0].seed) if samplers else None


def set_sampler_seed(loader: Iterable, seed: int | None) -> None:
    """Shuffle with the saved run's seed, whatever the resumed process was seeded with."""
    if seed is not None:
        for sampler in _distributed_samplers(loader):
            sampler.seed = seed


def inexact_resume_reason(loader: Iterable | None) -> str | None:
    """Why a checkpoint of a run on `loader` cannot resume its data exactly, or None when it can."""
    from torch.utils.data import DataLoader

    if not isinstance(loader, DataLoader) or not (loader.num_workers > 0 and loader.persistent_workers):
        return None
    if not draws_random_numbers(loader.dataset):
        return None
    return (
        "the train dataset draws random numbers in persistent worker processes, whose random streams run on "
        "across epochs and are not part of a checkpoint: after a resume, the random draws in the workers (e.g. "
        "augmentation) differ from the uninterrupted run's. Without persistent_workers, surge resumes them exactly."
    )


def epoch_start(loader: Any, epoch: int, resumed: dict[str, Any] | None) -> dict[str, Any]:
    """Start epoch `epoch` of `loader` (its sampler's `set_epoch`); returns the RNG at the epoch's
    start (`resumed`, when the epoch is resumed inside), which a checkpoint inside it records."""
    for inner in inner_loaders(loader):
        sampler: Any = getattr(inner, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
    return {**rng_state(), "generators": generator_states(loader)} if resumed is None else resumed
