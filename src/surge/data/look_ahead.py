"""A loader without a length, read one batch ahead, as Lightning's training loop reads it.

Lightning fetches the next batch of a train loader that has no length before it runs the current
one (it learns the epoch's last batch that way), so whatever the loader's iteration does on the main
process (an IterableDataset that plays an environment, updates the module's statistics at the end
of a pass, draws random numbers) happens one batch earlier than a plain `for` loop would do it.
Both of surge's APIs read such loaders this way; loaders with a length are read batch by batch (as
Lightning's). An error fetching the batch ahead is raised when that batch is asked for, so it names
its own batch, after the batch before it has run."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def one_ahead(it: Iterator[Any]) -> Iterator[Any]:
    """The items of `it`, each handed out once the next one has been fetched."""
    try:
        current = next(it)
    except StopIteration:
        return
    while True:
        try:
            following = next(it)
        except StopIteration:
            yield current
            return
        except Exception as err:  # the next batch's error: raised when it is asked for
            yield current
            raise err
        yield current
        current = following
