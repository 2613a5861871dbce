"""Which callbacks' `on_train_batch_end` an epoch's batches call, and whether they need `outputs`.

A callback of surge's marks its own hook with `@quiet_batch_end`: the hook never reads `outputs`
(the loop then builds no detached copy for it), and its object's `batch_end_idle(trainer)` may say,
at an epoch's start, that the hook would do nothing at any batch of that epoch (a checkpoint with no
step or time interval, a progress bar printing plain lines): the loop then does not call it. A
subclass that overrides the hook is not marked, so it is called, with the outputs, as before."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from ..trainer import Trainer

F = TypeVar("F", bound=Callable[..., Any])
_MARK = "_surge_quiet_batch_end"


def quiet_batch_end(fn: F) -> F:
    """Marks a callback's own `on_train_batch_end` that ignores `outputs` and may be idle."""
    setattr(fn, _MARK, True)
    return fn


def batch_end_calls(fns: Sequence[Callable[..., Any]], trainer: Trainer) -> list[Callable[..., Any]]:
    """The hooks to call at this epoch's batch ends (asked once, after its start hooks)."""
    calls = []
    for fn in fns:
        idle = getattr(getattr(fn, "__self__", None), "batch_end_idle", None)
        if not (getattr(fn, _MARK, False) and idle is not None and idle(trainer)):
            calls.append(fn)
    return calls


def reads_outputs(fns: Sequence[Callable[..., Any]]) -> bool:
    """Whether one of these hooks may read `outputs` (one not marked: a user's, or wrapped)."""
    return not all(getattr(fn, _MARK, False) for fn in fns)
