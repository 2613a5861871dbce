"""What a checkpoint may hold: values that `torch.load(weights_only=True)` reads back equal.

surge loads every checkpoint weights-only (no code runs), so a value that load refuses (a numpy
array, a datetime, a Path, an Enum, a dataclass, a namedtuple, ...) would make the file, and every
later resume from it, unreadable. The run's state is checked when it is gathered, before any writer
(at once, in the background, sharded) sees it: numpy scalars become Python numbers (as the loader
states do), a conjugate or negative view tensor becomes the plain tensor of its values; anything
else (a tensor with attributes, a container holding itself or nested over MAX_DEPTH deep included)
is a CheckpointError naming its key and the code that put it there.
Containers are copied only where a value changes: what a hook handed in is never modified.
"""

from __future__ import annotations

import collections
import copy
from collections.abc import Mapping
from typing import Any, NoReturn

import torch
from torch import Tensor

from ..errors import CheckpointError

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


MAX_DEPTH = 100  # deeper nesting is refused: the check (and the digest) recurse once per level


def check_state(state: dict[str, Any], source: str | Mapping[str, str]) -> None:
    """Turn numpy scalars in `state` (surge's own dict; nested containers are copied where they
    change) into Python numbers, or raise a CheckpointError naming the first value a weights-only
    load would refuse. `source` says who put the values there (or, per top-level key, who did)."""
    for key, value in list(state.items()):
        put = source if isinstance(source, str) else source.get(key, "surge")
        new = _Walk(put, sharded=key in SHARDED).checked(value, f"checkpoint[{key!r}]")
        if new is not value:
            state[key] = new


def checked_value(obj: Any, where: str, source: str) -> Any:
    """One value (at key `where`, put there by `source`) as `check_state` checks the whole state."""
    return _Walk(source).checked(obj, where)


class _Walk:
    """One value's walk: who put it there, and the containers open above the current one (a
    container met again inside itself is a cycle; more than MAX_DEPTH open is refused)."""

    def __init__(self, source: str, sharded: bool = False) -> None:
        self.source = source
        self.sharded = sharded
        self.open: list[int] = []

    def checked(self, obj: Any, where: str) -> Any:
        kind = type(obj)
        if kind is bytes and not obj:
            _refuse(obj, where, self.source, EMPTY_BYTES)
        if kind in LEAVES:
            return obj
        if isinstance(obj, Tensor):
            return _checked_tensor(obj, where, self.source, self.sharded)
        if kind in MAPPINGS or kind in SEQUENCES:
            self._enter(obj, where)
            try:
                if kind in MAPPINGS:
                    return self._checked_mapping(obj, where)
                items = [self.checked(v, f"{where}[{i}]") for i, v in enumerate(obj)]
            finally:
                self.open.pop()
            if all(new is old for new, old in zip(items, obj, strict=True)):
                return obj
            return kind(items)
        if _numpy_scalar(obj):
            value = obj.item()  # a datetime64 becomes a datetime: refused
            if _numpy_scalar(value):  # np.longdouble/clongdouble: wider than any Python number
                _refuse(
                    obj, where, self.source, "float(value) or complex(value) (rounded to double precision)"
                )
            return self.checked(value, where)
        _refuse(obj, where, self.source)

    def _enter(self, obj: Any, where: str) -> None:
        if id(obj) in self.open:
            raise CheckpointError(
                f"checkpoint not written: {where} is a {_type_name(obj)} that contains itself, which a "
                f"checkpoint cannot hold; {self.source} put it there. Store a value without a cycle"
            )
        if len(self.open) >= MAX_DEPTH:
            raise CheckpointError(
                f"checkpoint not written: {where} is nested more than {MAX_DEPTH} containers deep, which "
                f"a checkpoint does not hold; {self.source} put it there. Store a flatter value"
            )
        self.open.append(id(obj))

    def _checked_mapping(self, obj: Any, where: str) -> Any:
        out = obj
        for key, value in obj.items():
            new_key = _checked_key(key, where, self.source)
            new = self.checked(value, f"{where}[{key!r}]")
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
    if _plain_key(key, 0):
        return key
    raise CheckpointError(
        f"checkpoint not written: {where} has a key {key!r} of type {_type_name(key)}, which a checkpoint "
        f"cannot hold; {source} put it there. Use str or int keys"
    )


def _plain_key(key: Any, depth: int) -> bool:
    """A key a weights-only load rebuilds: a plain scalar, or a tuple of such keys (at any depth)."""
    if type(key) not in KEYS or key == b"":
        return False
    return type(key) is not tuple or (depth < MAX_DEPTH and all(_plain_key(k, depth + 1) for k in key))


def _checked_tensor(t: Tensor, where: str, source: str, sharded: bool) -> Tensor:
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
    attributes = [
        str(k) for k in t.__dict__ if not str(k).startswith("_dynamo")
    ]  # (torch.compile's own marks)
    if type(t) in TENSORS and attributes:  # pickled with the tensor (a copying writer drops them)
        raise CheckpointError(
            f"checkpoint not written: {where} is a tensor carrying attributes ({', '.join(attributes)}), "
            f"which a checkpoint does not keep; {source} put it there. Store value.detach() and the "
            "attributes as entries of their own"
        )
    if t.is_conj() or t.is_neg():  # a lazy view: its bytes are not its values
        resolved = t.detach().resolve_conj().resolve_neg()
        if type(t) is torch.nn.Parameter:
            return torch.nn.Parameter(resolved, requires_grad=t.requires_grad)
        return resolved.requires_grad_(t.requires_grad)
    return t


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
