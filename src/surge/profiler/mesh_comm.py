"""Where a step's time goes on a device mesh, from torch.profiler's records of a few steps: the
tensor-parallel collectives (DTensor's redistributions, in forward and backward), FSDP's
all-gathers and reduce-scatters, a pipeline's sends and receives, and how long a pipeline stage
waits on its neighbours inside the schedule.

The records are the host side of each collective, as torch writes them: DTensor's `Redistribute`
spans and its functional collectives (`_c10d_functional::*`, their launch and their wait), FSDP's
`FSDP::all_gather` / `FSDP::post_backward_reduce` spans, and the process group's send and receive
(`c10d::send`, `c10d::recv_`; on gloo, `gloo:send` / `gloo:recv` span the transfer itself). Each
category's time is the union of its spans (nested ones counted once); collectives are counted by
their launches, which are the same on every run of the same step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from ..strategies.pipeline_run import SCHEDULE_RECORD

START, ACTIVE = 3, 8  # profile the 8 training batches after the first 3 (compilation, first gathers)

TENSOR_PARALLEL, FSDP, PIPELINE = "tensor_parallel", "fsdp", "pipeline"
_FSDP_SPANS = ("FSDP::all_gather", "FSDP::post_backward_reduce", "FSDP::post_backward_rs_wait")
_P2P = ("c10d::send", "c10d::recv_", "gloo:send", "gloo:recv")
_RECEIVES = ("c10d::recv_", "gloo:recv")
_NOT_LAUNCHES = ("_c10d_functional::wait_tensor", "_c10d_functional::_wrap_tensor_autograd")


def category(name: str) -> str | None:
    """The communication a profiler record belongs to, or None."""
    if "Redistribute" in name or name.startswith("_c10d_functional::"):
        return TENSOR_PARALLEL
    if name.startswith(_FSDP_SPANS):
        return FSDP
    if name in _P2P:
        return PIPELINE
    return None


def is_launch(name: str, kind: str) -> bool:
    """Whether the record is one collective started (what is counted per step)."""
    if kind == TENSOR_PARALLEL:
        return name.startswith("_c10d_functional::") and name not in _NOT_LAUNCHES
    if kind == FSDP:
        return name in ("FSDP::all_gather", "FSDP::post_backward_reduce")
    return name in ("c10d::send", "c10d::recv_")


@dataclass(frozen=True)
class MeshComm:
    """What the profiled steps of one rank spent in each kind of communication."""

    steps: int
    wall_s: float  # the profiled steps' wall time
    seconds: dict[str, float] = field(default_factory=dict)  # kind: seconds in all profiled steps
    launches: dict[str, int] = field(default_factory=dict)  # kind: collectives started
    schedule_runs: int = 0
    schedule_s: float = 0.0
    waiting_s: float = 0.0  # receive waits inside the schedule runs

    def share(self, kind: str) -> float:
        return self.seconds.get(kind, 0.0) / self.wall_s if self.wall_s else 0.0

    def per_step(self, kind: str) -> float:
        return self.launches.get(kind, 0) / self.steps if self.steps else 0.0

    @property
    def waiting_share(self) -> float:
        """The share of the schedule's time this stage waited for a neighbour's send (measured idle)."""
        return self.waiting_s / self.schedule_s if self.schedule_s else 0.0

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"steps": self.steps, "wall_s": self.wall_s}
        for kind in (TENSOR_PARALLEL, FSDP, PIPELINE):
            out[kind] = {"share": self.share(kind), "per_step": self.per_step(kind)}
        if self.schedule_runs:
            out["schedule"] = {
                "runs": self.schedule_runs,
                "p2p_per_run": self.launches.get(PIPELINE, 0) / self.schedule_runs,
                "waiting_share": self.waiting_share,
            }
        return out


def measure(events: Iterable[Any]) -> MeshComm:
    """MeshComm from torch.profiler's function events (`profile.events()`)."""
    spans: dict[str, list[tuple[float, float]]] = {TENSOR_PARALLEL: [], FSDP: [], PIPELINE: []}
    launches = dict.fromkeys(spans, 0)
    steps: list[tuple[float, float]] = []
    schedule: list[tuple[float, float]] = []
    waits: list[tuple[float, float]] = []
    for event in events:
        name, span = event.name, (event.time_range.start, event.time_range.end)
        if name.startswith("ProfilerStep"):  # ("ProfilerStep*" in events())
            steps.append(span)
        elif name == SCHEDULE_RECORD:
            schedule.append(span)
        kind = category(name)
        if kind is None:
            continue
        spans[kind].append(span)
        launches[kind] += is_launch(name, kind)
        if name in _RECEIVES:
            waits.append(span)
    us = 1e-6  # the profiler's clock is in microseconds
    return MeshComm(
        steps=len(steps), wall_s=_union(steps) * us,
        seconds={kind: _union(s) * us for kind, s in spans.items()}, launches=launches,
        schedule_runs=len(schedule), schedule_s=_union(schedule) * us, waiting_s=_union(waits) * us,
    )  # fmt: skip


def _union(spans: list[tuple[float, float]]) -> float:
    """The length of the union of intervals (nested and overlapping ones counted once)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


class MeshTrace:
    """torch.profiler (CPU records) over `ACTIVE` training batches after the first `START`, on
    every rank; its own start and stop are left out of the phase timer's steps (`exclude`)."""

    def __init__(self, clock: Callable[[], float], exclude: Callable[[float], None]) -> None:
        self.clock, self.exclude = clock, exclude
        self.seen = 0  # training batches handed out, over all epochs
        self.result: MeshComm | None = None
        self._profile: Any = None

    def wrap(self, batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            self._advance()
            yield batch

    def _advance(self) -> None:
        self.seen += 1
        if self.seen < START or self.result is not None:
            return
        t0 = self.clock()
        if self._profile is None:
            self._profile = torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU],
                schedule=torch.profiler.schedule(wait=0, warmup=1, active=ACTIVE, repeat=1),
                on_trace_ready=self._read,
            )
            self._profile.start()
        else:
            self._profile.step()  # after the last active step: the records are read (`_read`)
        self.exclude(self.clock() - t0)

    def _read(self, profile: Any) -> None:
        self.result = measure(profile.events())

    def finish(self) -> MeshComm | None:
        """The measurement; a fit that ended inside the window is measured on the steps it had."""
        if self._profile is not None and self.result is None:
            self._profile.stop()
        self._profile = None
        return self.result
