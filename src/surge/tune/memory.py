"""Peak memory of a piece of work, deterministically, on the CPU and on CUDA.

CUDA: the caching allocator's own counter (`torch.cuda.max_memory_allocated`, reset before).
CPU: torch keeps no such counter, and the process's RSS is a poor proxy (the allocator and the OS
keep freed pages, other threads allocate, sampling misses short peaks). So the work runs under
`torch.profiler` with `profile_memory=True`, which records every allocation and free of torch's
CPU allocator with its size; the running sum of those, in time order, is the live memory, and
its maximum the peak. Same work, same number, every time.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch


def tensor_bytes(module: torch.nn.Module) -> int:
    """Bytes of the module's parameters, buffers and gradients (what exists before a step)."""
    total = sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))
    return total + sum(
        p.grad.numel() * p.grad.element_size() for p in module.parameters() if p.grad is not None
    )


def measure_peak(work: Callable[[], Any], device: torch.device) -> int:
    """Peak bytes allocated on `device` while `work()` runs, above what was allocated before.

    On CUDA this is `max_memory_allocated` minus the memory allocated at the start.
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
        work()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - start
    return _cpu_peak(work)


def _cpu_peak(work: Callable[[], Any]) -> int:
    from torch.profiler import ProfilerActivity, profile

    from . import native_stderr

    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with native_stderr.dropping_lines():  # torch prints a profiler_start line per profile
        prof.start()
    try:
        work()
    finally:
        with native_stderr.dropping_lines():  # ... and a profiler_stop line
            prof.stop()
    events = _cpu_memory_events(prof)
    live = peak = 0
    for _, nbytes in sorted(events):
        live += nbytes
        peak = max(peak, live)
    return peak


def _cpu_memory_events(prof: Any) -> list[tuple[int, int]]:
    from torch.autograd import DeviceType

    return [
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]" and e.device_type() == DeviceType.CPU
    ]


def available_ram() -> int:
    """Bytes of RAM available to new allocations (Linux `MemAvailable`; else total physical / 2)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
