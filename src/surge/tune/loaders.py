"""Re-creating a user's DataLoader with another batch size or worker setting.

Explicitly, from the loader's own arguments (`surge.data.clone_loader`): the user's sampler,
collate function and options are kept, the user's loader object is never changed.
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import BatchSampler, DataLoader, IterableDataset

from ..data import clone_loader
from ..errors import MisconfigurationError, SurgeTypeError


def loader_batch_size(loader: Any, arg: str = "train_dataloaders") -> int:
    """The batch size of a DataLoader that surge can re-create with another one."""
    if not isinstance(loader, DataLoader):
        raise SurgeTypeError(
            f"{arg} must be a torch DataLoader to change its batch size, got {type(loader).__name__}"
        )
    if loader.batch_size is None:
        raise MisconfigurationError(
            f"{arg} has no batch_size (a custom batch_sampler or batch_size=None); surge needs one: "
            "build it as DataLoader(dataset, batch_size=N, ...)."
        )
    if not isinstance(loader.dataset, IterableDataset) and type(loader.batch_sampler) is not BatchSampler:
        raise MisconfigurationError(
            f"{arg} uses a {type(loader.batch_sampler).__name__}; surge can change the batch size only "
            "of a loader built with batch_size= (a plain BatchSampler)."
        )
    return loader.batch_size


def with_batch_size(loader: DataLoader, batch_size: int, **changes: Any) -> DataLoader:
    """`loader` with another batch size: the same dataset, sampler, collate_fn and drop_last."""
    loader_batch_size(loader)
    if not isinstance(loader.dataset, IterableDataset):
        changes.setdefault("sampler", loader.sampler)
    return clone_loader(loader, batch_size=batch_size, **changes)


def with_workers(
    loader: DataLoader,
    num_workers: int,
    pin_memory: bool | None = None,
    persistent_workers: bool | None = None,
    prefetch_factor: int | None = None,
) -> DataLoader:
    """`loader` with another worker setting; batches come in the same order as before."""
    changes: dict[str, Any] = {"num_workers": num_workers}
    if pin_memory is not None:
        changes["pin_memory"] = pin_memory
    if num_workers > 0:
        changes["persistent_workers"] = (
            loader.persistent_workers if persistent_workers is None else persistent_workers
        )
        changes["prefetch_factor"] = prefetch_factor or loader.prefetch_factor or 2
    if not isinstance(loader.dataset, IterableDataset):
        if loader.batch_sampler is None or type(loader.batch_sampler) is BatchSampler:
            changes["sampler"] = loader.sampler  # batch_size and drop_last come with clone_loader
        else:
            changes["batch_sampler"] = loader.batch_sampler
    return clone_loader(loader, **changes)
