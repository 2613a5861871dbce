"""The first step's FLOP count: a step under torch's `FlopCounterMode` and under surge's `FlopCount`.

    PYTHONPATH=src python benchmarks/flop_count.py --repeats 200

A fit counts the FLOPs of its first training step (the goodput report's FLOP/s). This times one
forward and backward of a workload's model (`workloads.py`, one batch of 64) plain, under
`torch.utils.flop_counter.FlopCounterMode` (what surge used before) and under
`surge.profiler.flop_count.FlopCount` (what it uses now), each entered and left around the step,
interleaved in one process; medians of `--repeats`. Both counts are printed: they must agree.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).parent))
import workloads  # noqa: E402

from surge.profiler.flop_count import FlopCount  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="mlp", choices=sorted(workloads.TRAINING))
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    spec = workloads.TRAINING[args.workload]
    net = workloads.build_model(spec.model)
    batch = next(iter(workloads.make_loader(args.workload)))

    def step() -> None:
        workloads.compute_loss(net, batch).backward()

    def plain() -> int:
        step()
        return 0

    def torchs() -> int:
        with FlopCounterMode(display=False) as mode:
            step()
        return mode.get_total_flops()

    def surges() -> int:
        with FlopCount() as mode:
            step()
        return mode.total

    cases: dict[str, Callable[[], Any]] = {"plain": plain, "FlopCounterMode": torchs, "FlopCount": surges}
    load = os.getloadavg()[0]
    times: dict[str, list[float]] = {name: [] for name in cases}
    counts = {name: fn() for name, fn in cases.items()}  # (and a warm-up of each)
    for _ in range(args.repeats):
        for name, fn in cases.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    plain_s = statistics.median(times["plain"])
    print(
        f"{args.workload}: one forward and backward, {args.repeats} repeats interleaved, torch {torch.__version__}, "
        f"1 thread; load average {load:.2f} before, {os.getloadavg()[0]:.2f} after\n"
    )
    print("| step | median | vs plain | FLOPs counted |")
    print("|---|---:|---:|---:|")
    for name, t in times.items():
        median = statistics.median(t)
        print(f"| {name} | {median * 1e6:.0f} µs | {median / plain_s:.1f}x | {counts[name] or '-'} |")
    if counts["FlopCounterMode"] != counts["FlopCount"]:
        raise SystemExit("the two counts differ")


if __name__ == "__main__":
    main()
