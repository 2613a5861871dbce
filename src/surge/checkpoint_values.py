"""What a checkpoint may hold: values that `torch.load(weights_only=True)` reads back equal.

surge loads every checkpoint weights-only (no code runs), so a value that load refuses (a numpy
array, a datetime, a Path, an Enum, a dataclass, a namedtuple, ...) would make the file, and every
later resume from it, unreadable. The run's state is checked when it is gathered, before any writer
(at once, in the background, sharded) sees it: numpy scalars become Python numbers (as the loader
states do); anything else is a CheckpointError naming its key and the code that put it there.
Containers are copied only where a value changes: what a hook handed in is never modified.
"""

from __future__ import annotations

import collections
import copy
from collections.abc import Mapping
from typing import Any, NoReturn

import torch
from torch import Tensor

from .errors import CheckpointError

LEAVES = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    bytearray,
    torch.dtype,
    torch.device,
    torch.layout,
)
KEYS = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, tuple)
MAPPINGS = (dict, collections.OrderedDict, collections.Counter)
SEQUENCES = (list, tuple, set, torch.Size)
TENSORS = (Tensor, torch.nn.Parameter)
SHARDED = ("state_dict", "optimizer_states")  # a sharded strategy's DTensors live there (DCP writes them)
EMPTY_BYTES = (
    "an empty str or None (torch pickles b'' as a call of bytes(), which a weights-only load refuses)"
)
HOLDS = "dicts, lists, tuples, sets, str, int, float, bool, None, bytes, complex, torch dtypes/devices and dense tensors"
ADVICE = {
    "ndarray": "torch.from_numpy(value) or value.tolist()",
    "datetime": "value.isoformat()",
    "date": "value.isoformat()",
    "timedelta": "value.total_seconds()",
    "Path": "str(value)",
    "PosixPath": "str(value)",
    "WindowsPath": "str(value)",
    "frozenset": "set(value)",
    "defaultdict": "dict(value)",
}


def check_state(state: dict[str, Any], source: str | Mapping[str, str]) -> None:
    """Turn numpy scalars in `state` (surge's own dict; nested containers are copied where they
    change) into Python numbers, or raise a CheckpointError naming the first value a weights-only
    load would refuse. `source` says who put the values there (or, per top-level key, who did)."""
    for key, value in list(state.items()):
        put = source if isinstance(source, str) else source.get(key, "surge")
        new = _checked(value, f"checkpoint[{key!r}]", put, sharded=key in SHARDED)
        if new is not value:
            state[key] = new


def checked_value(obj: Any, where: str, source: str) -> Any:
    """One value (at key `where`, put there by `source`) as `check_state` checks the whole state."""
    return _checked(obj, where, source)


def _checked(obj: Any, where: str, source: str, sharded: bool = False) -> Any:
    kind = type(obj)
    if kind is bytes and not obj:
        _refuse(obj, where, source, EMPTY_BYTES)
    if kind in LEAVES:
        return obj
    if isinstance(obj, Tensor):
        _check_tensor(obj, where, source, sharded)
        return obj
    if kind in MAPPINGS:
        return _checked_mapping(obj, where, source, sharded)
    if kind in SEQUENCES:
        items = [_checked(v, f"{where}[{i}]", source, sharded) for i, v in enumerate(obj)]
        if all(new is old for new, old in zip(items, obj, strict=True)):
            return obj
        return kind(items)
    if _numpy_scalar(obj):
        return _checked(obj.item(), where, source, sharded)  # a datetime64 becomes a datetime: refused
    _refuse(obj, where, source)


def _checked_mapping(obj: Any, where: str, source: str, sharded: bool) -> Any:
    out = obj
    for key, value in obj.items():
        new_key = _checked_key(key, where, source)
        new = _checked(value, f"{where}[{key!r}]", source, sharded)
        if new is not value or new_key is not key:
            if out is obj:
                out = copy.copy(obj)  # the type and an OrderedDict's `_metadata` kept
            if new_key is not key:
                del out[key]
            out[new_key] = new
    return out


def _checked_key(key: Any, where: str, source: str) -> Any:
    if _numpy_scalar(key):
        key = key.item()
    plain = type(key) in KEYS and (type(key) is not tuple or all(type(k) in KEYS for k in key))
    if plain and key != b"" and not (type(key) is tuple and b"" in key):
        return key
    raise CheckpointError(
        f"checkpoint not written: {where} has a key {key!r} of type {_type_name(key)}, which a checkpoint "
        f"cannot hold; {source} put it there. Use str or int keys"
    )


def _check_tensor(t: Tensor, where: str, source: str, sharded: bool) -> None:
    if type(t) not in TENSORS and not (sharded and type(t).__name__ == "DTensor"):
        _refuse(t, where, source, "a plain torch.Tensor (value.as_subclass(torch.Tensor))")
    why = (
        "sparse" if t.layout is not torch.strided else "nested" if t.is_nested else "on the meta device"
        if t.device.type == "meta" else None
    )  # fmt: skip
    if why is not None:
        raise CheckpointError(
            f"checkpoint not written: {where} is a {why} tensor, which a checkpoint cannot hold (its "
            f"checksum reads a dense tensor's bytes); {source} put it there. Store a dense tensor "
            "(value.to_dense()) or its parts (indices and values)"
        )


def _numpy_scalar(obj: Any) -> bool:
    return type(obj).__module__ == "numpy" and getattr(obj, "ndim", None) == 0 and hasattr(obj, "item")


def _refuse(obj: Any, where: str, source: str, advice: str | None = None) -> NoReturn:
    name = type(obj).__name__
    if advice is None:
        advice = ADVICE.get(name)
    if advice is None and isinstance(obj, tuple) and hasattr(obj, "_fields"):
        advice = "tuple(value) or value._asdict()"
    if advice is None and hasattr(obj, "__dataclass_fields__"):
        advice = "dataclasses.asdict(value)"
    if advice is None and hasattr(type(obj), "__members__") and hasattr(obj, "value"):
        advice = "value.value or value.name"
    raise CheckpointError(
        f"checkpoint not written: {where} is a {_type_name(obj)}, which a checkpoint cannot hold (surge loads "
        f"checkpoints with torch.load(weights_only=True), which runs no code and refuses it, so every "
        f"later resume from this file would fail); {source} put it there. Store "
        f"{advice or 'it as ' + HOLDS} instead"
    )


def _type_name(obj: Any) -> str:
    kind = type(obj)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
