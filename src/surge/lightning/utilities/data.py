"""`lightning.pytorch.utilities.data`: `extract_batch_size` (the size `self.log` would infer from a
batch, with Lightning's warning for an ambiguous batch and its error for none) and the loader questions
of `lightning.fabric.utilities.data`."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from torch import Tensor

from ..fabric_utilities.data import has_iterable_dataset, has_len, sized_len
from .exceptions import MisconfigurationException
from .rank_zero import WarningCache

warning_cache = WarningCache()
_NO_SIZE = (
    "We could not infer the batch_size from the batch. Either simplify its structure"
    " or provide the batch_size as `self.log(..., batch_size=batch_size)`."
)


def is_dataclass_instance(obj: object) -> bool:
    """Whether `obj` is a dataclass instance (not a dataclass type)."""
    return dataclasses.is_dataclass(obj) and not isinstance(obj, type)


def _sizes(batch: Any) -> Iterator[int | None]:
    """The first-dimension size of each tensor in `batch`, depth first (1 for a 0-d tensor); None
    for a leaf that is no tensor."""
    if isinstance(batch, Tensor):
        yield batch.size(0) if batch.ndim else 1
    elif isinstance(batch, Iterable | Mapping) and not isinstance(batch, str):
        for item in batch.values() if isinstance(batch, Mapping) else batch:
            yield from _sizes(item)
    elif is_dataclass_instance(batch):
        for f in dataclasses.fields(batch):
            yield from _sizes(getattr(batch, f.name))
    else:
        yield None


def extract_batch_size(batch: Any) -> int:
    """The first tensor's first-dimension size in `batch`; warns when another tensor disagrees and
    raises `MisconfigurationException` when the first leaf holds no tensor."""
    size = None
    try:
        for found in _sizes(batch):
            if size is None:
                size = found
            elif size != found:
                warning_cache.warn(
                    "Trying to infer the `batch_size` from an ambiguous collection. The batch size we"
                    f" found is {size}. To avoid any miscalculations, use `self.log(..., batch_size=batch_size)`."
                )
                break
    except RecursionError:
        raise RecursionError(_NO_SIZE) from None
    if size is None:
        raise MisconfigurationException(_NO_SIZE)
    return size


__all__ = [
    "extract_batch_size",
    "has_iterable_dataset",
    "has_len",
    "is_dataclass_instance",
    "sized_len",
    "warning_cache",
]
