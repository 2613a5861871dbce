"""Contestants interleaved in one process, CPU time per optimizer step:
`python benchmarks/same_process.py --workload mlp_accum --contestants raw,surge --repeats 5`.

A cross-check of `run.py` when its A/A control keeps few repeats: every contestant runs in the same
interpreter (warmed up once each), in turn, `--repeats` times, and each timed fit is read with
`time.process_time` (this process's CPU time, less sensitive to other load than the wall clock).
Prints each contestant's median and every repeat, so the spread is in view.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time

import child
import torch
import workloads


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workload", choices=sorted(workloads.TRAINING), default="mlp_accum")
    p.add_argument("--contestants", default="raw,surge")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=500)
    args = p.parse_args()
    torch.set_num_threads(1)
    logging.disable(logging.INFO)  # surge's closing goodput line, once per fit
    names = args.contestants.split(",")
    for name in names:  # warm-up: imports, first-call costs
        fit, _ = child.BUILDERS[name](args.workload, 50)
        fit()
    times: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(args.repeats):
        for name in names:
            fit, _ = child.BUILDERS[name](args.workload, args.steps)
            start = time.process_time()
            steps = fit()
            times[name].append((time.process_time() - start) / steps * 1e6)
    for name in names:
        runs = ", ".join(f"{t:.0f}" for t in times[name])
        print(f"{name}: {statistics.median(times[name]):.0f} µs CPU per optimizer step (runs: {runs})")


if __name__ == "__main__":
    main()
