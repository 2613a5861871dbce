"""`lightning.fabric.utilities.types`: the aliases and protocols Lightning code annotates with."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

import torch
from torch.distributed import ReduceOp

_PATH = str | Path
_DEVICE = torch.device | str | int
_MAP_LOCATION_TYPE = _DEVICE | Callable[[Any, Any], Any] | dict[_DEVICE, _DEVICE] | None
_PARAMETERS = Iterator[torch.nn.Parameter]
RedOpType = Any
_DictKey = TypeVar("_DictKey")


@runtime_checkable
class _Stateful(Protocol[_DictKey]):
    """Something with `state_dict()` and `load_state_dict(...)`."""

    def state_dict(self) -> dict[_DictKey, Any]: ...
    def load_state_dict(self, state_dict: dict[_DictKey, Any]) -> None: ...


@runtime_checkable
class CollectibleGroup(Protocol):
    """A process group: it has a size and a rank."""

    def size(self) -> int: ...
    def rank(self) -> int: ...


@runtime_checkable
class Steppable(Protocol):
    """Something with `step(closure=None)`."""

    def step(self, closure: Callable[[], Any] | None = ...) -> Any: ...


@runtime_checkable
class Optimizable(Steppable, Protocol):
    """An optimizer: it steps and has param groups, defaults and a state."""

    param_groups: list[dict[Any, Any]]
    defaults: dict[Any, Any]
    state: Any

    def state_dict(self) -> dict[str, dict[Any, Any]]: ...
    def load_state_dict(self, state_dict: dict[str, dict[Any, Any]]) -> None: ...


__all__ = [
    "_DEVICE",
    "_MAP_LOCATION_TYPE",
    "_PARAMETERS",
    "_PATH",
    "CollectibleGroup",
    "Optimizable",
    "RedOpType",
    "ReduceOp",
    "Steppable",
    "_Stateful",
]
