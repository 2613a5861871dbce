"""`CombinedLoader`: several loaders read together, one combined batch per step.

The loaders come as one collection (a dict, list or tuple, nested as deep as wanted); each batch
has the collection's shape, with one batch of each loader in its place. How long an epoch lasts
is the mode's choice:

- `min_size`: until the shortest loader runs out.
- `max_size_cycle`: until the longest runs out; the shorter ones start over when they run out.
- `max_size`: until the longest runs out; a loader that ran out gives None.
- `sequential`: one loader after the other, each read whole; a step gets one loader's batch.

Iterating it yields `(batch, batch_idx, dataloader_idx)` (`dataloader_idx` is 0 in the modes
that read the loaders together). `limits` caps each loader's batches: `len()` counts with them,
and `sequential` moves on to the next loader at its limit (the other modes stop where a loop
stops at `len()`). The Trainer gives each loader its per-loader `limit_*_batches` this way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from ..errors import MisconfigurationError

MODES = ("min_size", "max_size_cycle", "max_size", "sequential")
_PRIMITIVE = (int, float, str)


def _children(node: Any) -> list[Any] | None:
    """The children of a collection node (dict, list, tuple, namedtuple), or None for a leaf."""
    if isinstance(node, Mapping):
        return list(node.values())
    if isinstance(node, list | tuple):
        return list(node)
    return None


def _is_leaf(node: Any) -> bool:
    """A leaf: anything not a collection, or a collection of plain numbers and strings (such as a
    list of ints, which is itself an iterable of batches)."""
    children = _children(node)
    return children is None or all(isinstance(c, _PRIMITIVE) for c in children)


def flatten(tree: Any) -> tuple[list[Any], Callable[[Iterator[Any]], Any]]:
    """The leaves of `tree` in order, and a function that builds the same shape from an iterator of
    new leaves."""
    if _is_leaf(tree):
        return [tree], next
    children = _children(tree)
    assert children is not None
    parts = [flatten(c) for c in children]
    leaves = [leaf for found, _ in parts for leaf in found]
    builders = [build for _, build in parts]

    def build(values: Iterator[Any]) -> Any:
        built = [b(values) for b in builders]
        if isinstance(tree, Mapping):
            mapped = dict(zip(tree.keys(), built))
            return mapped if type(tree) is dict else type(tree)(mapped)  # type: ignore[call-arg]
        if isinstance(tree, tuple) and hasattr(tree, "_fields"):
            return type(tree)(*built)
        return type(tree)(built)

    return leaves, build


def sized_length(iterable: Any) -> int | float:
    """`len(iterable)`, or math.inf when it has none."""
    try:
        return len(iterable)
    except (TypeError, NotImplementedError):
        return math.inf


def combined_length(mode: str, lengths: list[int | float], limits: list[int | float] | None) -> int | float:
    """The batches a CombinedLoader yields in `mode` for loaders of `lengths`, each capped by `limits`."""
    capped = lengths if limits is None else [min(n, lim) for n, lim in zip(lengths, limits)]
    if not capped:
        return 0
    if mode == "min_size":
        return min(capped)
    return sum(capped) if mode == "sequential" else max(capped)


class CombinedLoader(Iterable):
    """Several loaders (a collection of them) read together in one of four modes (see the module doc).

    >>> from torch.utils.data import DataLoader
    >>> both = CombinedLoader({"a": DataLoader(range(6), batch_size=4), "b": DataLoader(range(15), batch_size=5)})
    >>> [(sorted(batch), i) for batch, i, _ in both]
    [(['a', 'b'], 0), (['a', 'b'], 1)]
    """

    def __init__(self, iterables: Any, mode: str = "min_size") -> None:
        if mode not in MODES:
            raise MisconfigurationError(f"Unsupported mode {mode!r}, please select one of: {list(MODES)}.")
        self._iterables = iterables
        self._flattened, self._build = flatten(iterables)
        self._mode = mode
        self._limits: list[int | float] | None = None
        self._iterator: _ModeIterator | None = None

    @property
    def mode(self) -> str:
        """How the loaders are combined: one of `MODES`."""
        return self._mode

    @property
    def iterables(self) -> Any:
        """The collection of loaders, in the shape it was given."""
        return self._iterables

    @property
    def flattened(self) -> list[Any]:
        """The loaders, in the collection's order (a dict's in its keys' order)."""
        return self._flattened

    @flattened.setter
    def flattened(self, loaders: list[Any]) -> None:
        if len(loaders) != len(self._flattened):
            raise MisconfigurationError(
                f"Mismatch in flattened length ({len(loaders)}) and existing length ({len(self._flattened)})"
            )
        self._iterables = self._build(iter(loaders))
        self._flattened = list(loaders)

    @property
    def sampler(self) -> Any:
        """Each loader's `sampler` (None where it has none), in the collection's shape."""
        return self._build(iter([getattr(x, "sampler", None) for x in self._flattened]))

    @property
    def batch_sampler(self) -> Any:
        """Each loader's `batch_sampler` (None where it has none), in the collection's shape."""
        return self._build(iter([getattr(x, "batch_sampler", None) for x in self._flattened]))

    @property
    def limits(self) -> list[int | float] | None:
        """The most batches taken from each loader (None: no limit)."""
        return self._limits

    @limits.setter
    def limits(self, limits: int | float | list[int | float] | None) -> None:
        if isinstance(limits, int | float):
            limits = [limits] * len(self._flattened)
        elif isinstance(limits, list) and len(limits) != len(self._flattened):
            raise MisconfigurationError(
                f"Mismatch in number of limits ({len(limits)}) and number of iterables ({len(self._flattened)})"
            )
        self._limits = limits

    def __iter__(self) -> CombinedLoader:
        self._iterator = _ITERATORS[self._mode](self._flattened, self._limits)
        return self

    def __next__(self) -> tuple[Any, int, int]:
        if self._iterator is None:
            raise MisconfigurationError("Please call `iter(combined_loader)` first.")
        out, batch_idx, dataloader_idx = next(self._iterator)
        if self._mode != "sequential":
            out = self._build(iter(out))
        return out, batch_idx, dataloader_idx

    def __len__(self) -> int:
        """The batches one pass yields (after `iter()`, as Lightning's); a TypeError when a loader has no length."""
        if self._iterator is None:
            raise RuntimeError("Please call `iter(combined_loader)` first.")
        n = self.length()
        if n == math.inf:
            raise TypeError("a loader of this CombinedLoader has no length")
        return int(n)

    def length(self, limits: list[int | float] | None = None) -> int | float:
        """The batches one pass yields under `limits` (default: `self.limits`); math.inf without a length."""
        lengths = [sized_length(x) for x in self._flattened]
        return combined_length(self._mode, lengths, self._limits if limits is None else limits)

    def reset(self) -> None:
        """Drop the pass under way and the loaders' own iterators (their worker processes stop)."""
        self._iterator = None
        for loader in self._flattened:
            if getattr(loader, "_iterator", None) is not None:
                loader._iterator = None

    def with_loaders(self, loaders: list[Any]) -> CombinedLoader:
        """A new CombinedLoader of the same shape and mode over `loaders` (this one is left as it is)."""
        new = CombinedLoader(self._iterables, self._mode)
        new.flattened = loaders
        return new


def inner_loaders(loader: Any) -> list[Any]:
    """The loaders a stage's loader reads: a CombinedLoader's own (or those of the batches a loop
    runs from one, which keep it as `combined`), else the loader itself."""
    combined = loader if isinstance(loader, CombinedLoader) else getattr(loader, "combined", None)
    return list(combined.flattened) if isinstance(combined, CombinedLoader) else [loader]


class _ModeIterator:
    """One pass over the loaders: yields `([batch per loader] or batch, batch_idx, dataloader_idx)`."""

    def __init__(self, loaders: list[Any], limits: list[int | float] | None) -> None:
        self.loaders, self.limits = loaders, limits
        self.iterators = [iter(x) for x in loaders]  # all started now, in order, as a loop would
        self.idx = 0

    def __iter__(self) -> _ModeIterator:
        return self

    def __next__(self) -> tuple[Any, int, int]:
        out = self.combine()
        self.idx += 1
        return out, self.idx - 1, 0

    def combine(self) -> Any:
        raise NotImplementedError


class _MinSize(_ModeIterator):
    def combine(self) -> list[Any]:
        return [next(it) for it in self.iterators]


class _MaxSizeCycle(_ModeIterator):
    def __init__(self, loaders: list[Any], limits: list[int | float] | None) -> None:
        super().__init__(loaders, limits)
        self.ran_out = [False] * len(loaders)

    def combine(self) -> list[Any]:
        out = []
        for i, it in enumerate(self.iterators):
            try:
                out.append(next(it))
            except StopIteration:
                self.ran_out[i] = True
                if all(self.ran_out):
                    raise
                self.iterators[i] = iter(self.loaders[i])  # this one starts over
                out.append(next(self.iterators[i]))
        return out


class _MaxSize(_ModeIterator):
    def combine(self) -> list[Any]:
        out, any_left = [], False
        for it in self.iterators:
            batch = next(it, _DONE)
            any_left |= batch is not _DONE
            out.append(None if batch is _DONE else batch)
        if not any_left:
            raise StopIteration
        return out


class _Sequential(_ModeIterator):
    """Each loader whole (up to its limit) before the next; only the current one has an iterator."""

    def __init__(self, loaders: list[Any], limits: list[int | float] | None) -> None:
        self.loaders, self.limits, self.idx, self.current = loaders, limits, 0, 0
        self.iterators = [iter(loaders[0])] if loaders else []

    def __next__(self) -> tuple[Any, int, int]:
        while self.current < len(self.loaders):
            limit = math.inf if self.limits is None else self.limits[self.current]
            batch = next(self.iterators[0], _DONE) if self.idx < limit else _DONE
            if batch is not _DONE:
                self.idx += 1
                return batch, self.idx - 1, self.current
            self.current, self.idx = self.current + 1, 0
            self.iterators = [iter(self.loaders[self.current])] if self.current < len(self.loaders) else []
        raise StopIteration


_DONE = object()
_ITERATORS: dict[str, type[_ModeIterator]] = {
    "min_size": _MinSize,
    "max_size_cycle": _MaxSizeCycle,
    "max_size": _MaxSize,
    "sequential": _Sequential,
}
