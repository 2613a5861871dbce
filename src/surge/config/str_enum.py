"""A str enum that compares with strings whatever their case (`TrainerFn.FITTING == "FIT"`), as
Lightning's enums do, so hooks and user code read the same values under `surge run` as under
Lightning. surge's own: the one in `lightning_utilities` costs its package's import (about 0.09 s,
mostly `packaging`'s version parser) in every `from surge import Trainer`."""

from __future__ import annotations

import warnings
from enum import Enum
from typing import Literal, TypeVar

E = TypeVar("E", bound="StrEnum")
Source = Literal["key", "value", "any"]


class StrEnum(str, Enum):
    """Members are strings; equality with a string or another enum ignores case (hash too)."""

    @classmethod
    def from_str(cls: type[E], value: str, source: Source = "key") -> E:
        """The member whose name (`source="key"`), value (`"value"`) or either (`"any"`, names
        first) matches `value`; names match in any case. ValueError naming the choices otherwise."""
        if source in ("key", "any"):
            for name in cls.__members__:
                if name.lower() == value.lower():
                    return cls[name]
        if source in ("value", "any"):
            for name, member in cls.__members__.items():
                if member == value:
                    return cls[name]
        raise ValueError(f"Invalid match: expected one of {cls._choices(source)}, but got {value}.")

    @classmethod
    def try_from_str(cls: type[E], value: str, source: Source = "key") -> E | None:
        """`from_str`, or None with a warning naming the choices."""
        try:
            return cls.from_str(value, source)
        except ValueError:
            warnings.warn(
                UserWarning(f"Invalid string: expected one of {cls._choices(source)}, but got {value}."),
                stacklevel=2,
            )
        return None

    @classmethod
    def _choices(cls, source: str) -> list[str]:
        names = list(cls.__members__)
        values = [member.value for member in cls.__members__.values()]
        return names if source == "key" else values if source == "value" else names + values

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Enum):
            other = other.value
        return self.value.lower() == str(other).lower()

    def __hash__(self) -> int:
        return hash(self.value.lower())
