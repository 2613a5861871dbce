"""torch's "This DataLoader will create N worker processes ..." warning, said once. torch says it
when the user builds a DataLoader with more workers than CPUs, and again on every copy and every
iterator; surge copies the user's loaders (to add its worker hooks), so the user saw it three
times. The copies surge makes of such a loader, and their iterators, do not repeat it."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from ..launch.host import cpu_count

T = TypeVar("T")
_TORCHS = r"This DataLoader will create \d+ worker processes"


def seen_by_user(user_workers: int, num_workers: int) -> bool:
    """The copy keeps the user's worker count, which torch already warned about (more than the CPUs)."""
    return num_workers == user_workers > cpu_count()


def built_quietly(build: Callable[[], T]) -> T:
    """`build()` (a copy of the user's loader) without torch's worker-count warning; nor do its iterators."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_TORCHS, category=UserWarning)
        copy = build()
    return quiet_iterators(copy)


def quiet_iterators(copy: T) -> T:
    """`copy`'s iterators do not repeat the warning (its check is a no-op: the copy is surge's own)."""
    copy.check_worker_number_rationality = _said_already  # type: ignore[attr-defined]
    return copy


def _said_already(*_: Any) -> None:
    """The user's own DataLoader(...) said it."""
