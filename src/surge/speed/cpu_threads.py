"""Whether torch's intra-op threads outnumber the CPUs free for them, checked once per process when
a fit starts on the CPU (surge's own API; Lightning says nothing, so its mode stays silent).

On a busy machine torch's default (one thread per CPU) makes the threads wait for each other: 300
steps of a small MLP took 47-51 s with 2 threads and 0.9-1.9 s with 1, on 2 CPUs under a load of
11-18. The check reads three numbers (threads, the CPUs this process may use, the 1-minute load
average) and says which setting fixes it; it costs nothing per step."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch

from ..launch.host import cpu_count
from ..rank_zero import warn

_checked = False  # once a process: the first fit on the CPU


@dataclass(frozen=True)
class ThreadUse:
    """The threads each of `processes` (on this host) runs, the `cpus` they may use, the host's load."""

    threads: int
    processes: int
    cpus: int
    load: float

    def advice(self) -> str | None:
        """What to set, when the threads outnumber the CPUs not busy with other work; else None."""
        others = max(0.0, self.load - self.processes)  # the load this job's own processes do not make
        free = max(self.processes, math.floor(self.cpus - others + 0.5))
        if self.threads <= 1 or self.threads * self.processes <= free:
            return None
        fit = max(1, free // self.processes)
        each = f" in each of {self.processes} processes" if self.processes > 1 else ""
        return (
            f"torch runs {self.threads} intra-op threads{each} on {self.cpus} CPU(s) with a load average of "
            f"{self.load:.1f}: more threads than free CPUs wait for each other, which can make training "
            f"several times slower. Use {fit} thread(s): torch.set_num_threads({fit}) before fit(), or "
            f"OMP_NUM_THREADS={fit} in the environment."
        )


def check_cpu_threads(processes: int) -> None:
    """Warn once a process when the fit's CPU threads are oversubscribed (see `ThreadUse.advice`)."""
    global _checked
    if _checked:
        return
    _checked = True
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # not on this platform: the CPUs alone
        load = 0.0
    advice = ThreadUse(torch.get_num_threads(), processes, cpu_count(), load).advice()
    if advice is not None:
        warn(advice)
