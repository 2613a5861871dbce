"""`Trainer(num_workers="auto")`: measure loading while training, then move the fit to the worker
count that loads fastest.

The fit's first batches load in this process and are trained on like any others; their fetch and
step times (wall and CPU) predict each worker count's time per batch. When a count pays for its
start-up over what is left of the fit, the rest of the first epoch continues on a loader with that
many workers, from the next batch in the same order (the epoch's permutation is drawn again from its
start state and the batches already trained on are skipped by index, never loaded again). A few
batches then check the count is faster; if not, loading goes back into this process. From the next
epoch on the train and val loaders are re-created with the count and persistent workers. A fit that
switched trains exactly what a fit with `num_workers=<count>` from the start trains.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from torch.utils.data import DataLoader, IterableDataset

from ..data import resume_iterator
from ..rank_zero import info
from .loaders import with_workers

PROBE = 6  # batches timed in this process; the first is a warm-up and not counted
CHECK = 4  # batches timed after a switch, once every worker has delivered its first
MIN_GAIN = 0.10  # a count must promise to save at least this share of the time per batch
TOLERANCE = 0.05  # the fewest workers whose prediction is within this of the best
STARTUP_S = 0.05  # starting one worker process, about (the fit must save twice what starting costs)
HANDOFF_S = 0.0005  # this process receiving one batch from a worker, about


@dataclass(frozen=True)
class Probe:
    """Medians over the probe's batches: wall and CPU seconds to fetch one, and to train on one."""

    fetch_s: float
    fetch_cpu_s: float
    step_s: float
    step_cpu_s: float

    @property
    def batch_s(self) -> float:
        return self.fetch_s + self.step_s

    def predict(self, workers: int, cpus: int) -> float:
        """Seconds per batch with `workers` loading: the slower of this process's step, the workers'
        loading, and the CPU time both need shared over the cores."""
        cores = max(1, min(cpus, workers + 1))
        here = self.step_s + HANDOFF_S
        return max(here, self.fetch_s / workers, (self.step_cpu_s + HANDOFF_S + self.fetch_cpu_s) / cores)


class AutoWorkers:
    """Decides the train loader's worker count during the fit's first epoch (see the module doc).

    `watch` wraps that epoch's batch iterator; `settled` gives the loaders for the later epochs.
    """

    def __init__(
        self,
        train: DataLoader,
        vals: list[Iterable],
        fit_batches: int | float,
        max_workers: int,
        prepare: Callable[[DataLoader], DataLoader],
    ) -> None:
        self.train, self.vals = train, vals
        self.fit_batches, self.max_workers, self.prepare = fit_batches, max_workers, prepare
        self.workers = 0  # the count decided on (0: loading stays in this process)
        self.said = ""

    @staticmethod
    def start_loader(train: DataLoader) -> DataLoader:
        """The loader the fit starts on: `train` loading in this process."""
        return train if train.num_workers == 0 else with_workers(train, 0)

    def watch(
        self, batches: Iterator[Any], start: int, epoch_start_rng: dict[str, Any] | None
    ) -> Iterator[Any]:
        """The epoch's batches, the same ones in the same order, timed and possibly switched."""
        timed: list[tuple[float, float, float, float]] = []
        clock, cpu = time.perf_counter, time.process_time
        index = start
        while len(timed) < PROBE:
            t0, c0 = clock(), cpu()
            batch = next(batches, _END)
            if batch is _END:
                if self._decide(timed) and self.workers:
                    self._say("used from the next epoch (this one ended)")
                return
            t1, c1 = clock(), cpu()
            yield batch
            timed.append((t1 - t0, c1 - c0, clock() - t1, cpu() - c1))
            index += 1
        if not self._decide(timed) or self.workers == 0:
            yield from batches
        elif isinstance(self.train.dataset, IterableDataset):
            self._say("used from the next epoch (an IterableDataset's stream changes with the worker count)")
            yield from batches
        else:
            yield from self._switched(index, epoch_start_rng, self._probe(timed).batch_s)

    def _switched(self, index: int, epoch_start_rng: dict[str, Any] | None, before_s: float) -> Iterator[Any]:
        loader = self.prepare(with_workers(self.train, self.workers, persistent_workers=False))
        batches = resume_iterator(loader, index, epoch_start_rng, by_index=True)
        began = 0.0
        for seen, batch in enumerate(batches):
            if seen == self.workers:  # every worker has delivered its first batch: start-up is over
                began = time.perf_counter()
            elif seen == self.workers + CHECK:
                per_batch = (time.perf_counter() - began) / CHECK
                yield batch
                if per_batch < before_s:
                    self._say(
                        f"switched at batch {index}: {per_batch * 1e3:.1f} ms per batch with them, "
                        f"{before_s / per_batch:.2f}x"
                    )
                    yield from batches
                    return
                del batches  # its workers stop
                count, self.workers = self.workers, 0
                self._say(
                    f"switched at batch {index}, but {_workers(count)} took {per_batch * 1e3:.1f} ms per batch "
                    f"against {before_s * 1e3:.1f} ms in this process, so loading went back to this process"
                )
                yield from resume_iterator(self.train, index + seen + 1, epoch_start_rng, by_index=True)
                return
            yield batch
        self._say(f"switched at batch {index}; not timed, the epoch ended first")

    def settled(self) -> tuple[Iterable, list[Iterable]]:
        """The train and val loaders for the epochs after the first."""
        if self.workers == 0:
            return self.train, self.vals
        count = self.workers

        def persistent(loader: Iterable) -> Iterable:
            if not isinstance(loader, DataLoader):
                return loader
            return self.prepare(with_workers(loader, count, persistent_workers=True))

        return persistent(self.train), [persistent(v) for v in self.vals]

    # -- deciding --------------------------------------------------------------------------
    def _decide(self, timed: list[tuple[float, float, float, float]]) -> bool:
        """Set `workers` from the probe; False (and said why) when loading stays in this process."""
        if len(timed) < 3:
            self.said = f"the first epoch has only {len(timed)} batches, too few to time"
            self._say("")
            return False
        probe = self._probe(timed)
        counts = range(1, max(1, self.max_workers) + 1)
        predicted = {k: probe.predict(k, self.max_workers) for k in counts}
        best = min(predicted.values())
        count = min(k for k, p in predicted.items() if p <= (1 + TOLERANCE) * best)
        saving = probe.batch_s - predicted[count]
        left = self.fit_batches - len(timed)
        self.said = f"loading took {probe.fetch_s * 1e3:.1f} ms of each {probe.batch_s * 1e3:.1f} ms batch in this process"
        if self.max_workers < 1 or saving < MIN_GAIN * probe.batch_s:
            self.said += f"; workers would save under {MIN_GAIN:.0%}, so it stays there"
        elif left * saving < 2 * (STARTUP_S * count + probe.fetch_s):
            self.said += (
                f"; the {left:,.0f} batches left are too few for {_workers(count)} to pay for starting"
            )
        else:
            self.workers = count
            self.said += f"; {_workers(count)} predicted at {predicted[count] * 1e3:.1f} ms"
            return True
        self._say("")
        return False

    @staticmethod
    def _probe(timed: list[tuple[float, float, float, float]]) -> Probe:
        import statistics  # with decimal and fractions: loaded only when workers are measured

        rows = timed[1:]  # the first batch pays for warm-ups of its own
        return Probe(*(statistics.median(r[i] for r in rows) for i in range(4)))

    def _say(self, outcome: str) -> None:
        text = f"num_workers='auto': {self.said}"
        if outcome:
            text += f", {outcome}"
        if self.workers:
            text += f"; the train and val loaders use {self.workers}"
        info(text)


_END = object()


def _workers(count: int) -> str:
    return f"{count} worker" + ("" if count == 1 else "s")


def too_short(fit_batches: int | float) -> bool:
    """Whether a fit loads too few batches for `AutoWorkers` to time and switch."""
    return fit_batches < PROBE + 2 or math.isnan(fit_batches)
