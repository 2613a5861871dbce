"""Per-step phase timing: where each training step's wall time goes.

Phases are timed by wrapping the callables the training loop already uses (the data iterator,
the batch move, the step, backward, the optimizer step, the batch hooks, the logging call), so the
loop itself is unchanged and costs nothing extra when no profiler is set. On CPU each phase is two
`perf_counter` reads; on CUDA, device work is timed with events recorded into lists and read once
at the end (no sync per step); waiting for data is host time either way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, overload

import torch

PHASES = ("data", "transfer", "forward", "backward", "optimizer", "callbacks", "logging")


@dataclass
class StepRecord:
    """One training step: seconds per phase, and the step's whole wall time."""

    phases: dict[str, float] = field(default_factory=dict)
    total: float = 0.0


class PhaseTimer:
    """Collects per-step phase times; `wrap_*` return timed versions of the loop's callables."""

    def __init__(self, device: torch.device | None = None) -> None:
        self.cuda = device is not None and device.type == "cuda"
        self.steps: list[StepRecord] = []
        self.validation_s = 0.0
        self.comm_s: list[float] = []  # gradient communication per step (from a comm hook)
        self._current: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self._events: list[tuple[int, str, Any, Any]] = []  # (step, phase, start, end) on CUDA
        self._step_start: float | None = None
        self._comm = 0.0
        self.clock = time.perf_counter

    # -- step boundaries -------------------------------------------------------------------
    def _close_step(self, now: float) -> None:
        if self._step_start is not None:
            self.steps.append(StepRecord(dict(self._current), now - self._step_start))
            self.comm_s.append(self._comm)
        self._current = dict.fromkeys(PHASES, 0.0)
        self._comm = 0.0
        self._step_start = now

    def finish(self) -> None:
        """End the last step and resolve CUDA events (the one device sync of a profiled run)."""
        self._close_step(self.clock())
        self._step_start = None
        if self._events:
            torch.cuda.synchronize()
            for index, phase, start, end in self._events:
                if index < len(self.steps):
                    self.steps[index].phases[phase] = start.elapsed_time(end) / 1000.0
            self._events.clear()

    # -- wrappers --------------------------------------------------------------------------
    def wrap_iterator(self, it: Iterator[Any]) -> Iterator[Any]:
        """Each `next()` starts a new step; the time spent inside it is the data wait."""
        clock = self.clock

        def timed() -> Iterator[Any]:
            while True:
                t0 = clock()
                self._close_step(t0)
                try:
                    batch = next(it)
                except StopIteration:
                    return
                self._current["data"] += clock() - t0
                yield batch

        return timed()

    @overload
    def wrap(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]: ...
    @overload
    def wrap(self, phase: str, fn: None) -> None: ...
    def wrap(self, phase: str, fn: Callable[..., Any] | None) -> Callable[..., Any] | None:
        if fn is None:
            return None
        clock = self.clock
        if self.cuda and phase in ("transfer", "forward", "backward", "optimizer"):
            return self._wrap_cuda(phase, fn)

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                self._current[phase] += clock() - t0

        return timed

    def _wrap_cuda(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        events = self._events

        def timed(*args: Any, **kwargs: Any) -> Any:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            try:
                return fn(*args, **kwargs)
            finally:
                end.record()
                events.append((len(self.steps), phase, start, end))

        return timed

    def wrap_hooks(self, fns: Any) -> Any:
        return tuple(self.wrap("callbacks", fn) for fn in fns)

    def exclude(self, seconds: float) -> None:
        """Leave `seconds` just spent (a profiler's own work) out of the current step's wall time."""
        if self._step_start is not None:
            self._step_start += seconds

    def add_comm(self, seconds: float) -> None:
        self._comm += seconds

    def add_validation(self, seconds: float) -> None:
        self.validation_s += seconds

    # -- summaries -------------------------------------------------------------------------
    def summary(self, skip: int = 2) -> dict[str, Any]:
        """Mean seconds per phase and per step, and each phase's share, over the steps after `skip`."""
        steps = self.steps[skip:] if len(self.steps) > skip + 2 else self.steps
        if not steps:
            return {"steps": 0, "step_s": 0.0, "phases": {}, "shares": {}}
        n = len(steps)
        step_s = sum(s.total for s in steps) / n
        phases = {p: sum(s.phases.get(p, 0.0) for s in steps) / n for p in PHASES}
        phases["other"] = max(0.0, step_s - sum(phases.values()))
        comm = self.comm_s[-n:] if self.comm_s else []
        out: dict[str, Any] = {
            "steps": n,
            "step_s": step_s,
            "phases": phases,
            "shares": {p: (v / step_s if step_s else 0.0) for p, v in phases.items()},
            "validation_s": self.validation_s,
            "trained_s": sum(s.total for s in self.steps)
            + self.validation_s,  # all steps, for the report's budget
        }
        if any(comm):
            out["comm_s"] = sum(comm) / len(comm)
            out["comm_share"] = out["comm_s"] / step_s if step_s else 0.0
        return out
