"""What the callbacks' helpers read of the Trainer, as small Protocols shared by several callbacks.

A hook receives the Trainer itself (the public API); a helper that is not a hook is typed by the
members it uses, so that what it depends on is stated and checked (mypy checks that the Trainer
satisfies each Protocol where a hook passes it on)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..strategies import Strategy


class Ranks(Protocol):
    """A decision every process takes alike: the process count and the strategy's collectives."""

    @property
    def world_size(self) -> int: ...
    @property
    def strategy(self) -> Strategy: ...


class Stopping(Ranks, Protocol):
    """A stop every process agrees on (Timer, EarlyStopping): `should_stop` is set, never cleared."""

    should_stop: bool
