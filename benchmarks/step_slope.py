"""Per-step cost and per-fit cost, told apart: each contestant's fit timed at two lengths in one process.

    python benchmarks/step_slope.py --workloads mlp,mlp_log,mlp_accum --repeats 7

`run.py` divides a whole fit's time by its steps, so a fixed cost (building the loop, the hooks, the
loggers) counts as per-step overhead in a short fit. Here each contestant (`child.py`'s builders: the
hand-written loop, surge with the benchmark's settings, surge's defaults) runs fits of `--short` and
`--long` optimizer steps (and surge with `on_nonfinite=None`, to price the default watch),
interleaved with the others, in this one process after a warm-up fit. The
slope (long - short) / (long - short steps) is the cost of a step; the intercept is the cost of a fit
that runs no step. Medians of `--repeats`. A fit that crosses an epoch end pays that epoch end
(validation, a checkpoint) inside the slope, as a real fit does.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import child
import torch
import workloads

CONTESTANTS = ("raw", "surge", "surge_unwatched", "surge_defaults")
BUILDERS = {
    **child.BUILDERS,
    # the benchmark's settings without the default non-finite watch (one add per micro-batch)
    "surge_unwatched": lambda workload, steps: child.surge_contestant(workload, steps, on_nonfinite=None),
}


def fit_seconds(contestant: str, workload: str, steps: int) -> float:
    workloads.seed_everything()
    fit, _ = BUILDERS[contestant](workload, steps)
    start = time.perf_counter()
    fit()
    return time.perf_counter() - start


def measure(workload: str, args: argparse.Namespace) -> dict[str, tuple[float, float]]:
    """contestant -> (seconds per step, seconds per fit with no step), medians over the repeats."""
    for contestant in CONTESTANTS:
        fit_seconds(contestant, workload, 20)  # warm-up: first-call costs out of the timings
    short: dict[str, list[float]] = {c: [] for c in CONTESTANTS}
    long: dict[str, list[float]] = {c: [] for c in CONTESTANTS}
    for _ in range(args.repeats):
        for contestant in CONTESTANTS:
            short[contestant].append(fit_seconds(contestant, workload, args.short))
            long[contestant].append(fit_seconds(contestant, workload, args.long))
    out = {}
    for contestant in CONTESTANTS:
        s, lg = statistics.median(short[contestant]), statistics.median(long[contestant])
        per_step = (lg - s) / (args.long - args.short)
        out[contestant] = (per_step, s - args.short * per_step)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="mlp,mlp_log,mlp_accum")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--short", type=int, default=10, help="optimizer steps of the short fit")
    parser.add_argument("--long", type=int, default=510, help="optimizer steps of the long fit")
    args = parser.parse_args()
    torch.set_num_threads(1)
    load = os.getloadavg()
    rows = {w: measure(w, args) for w in args.workloads.split(",")}
    print(
        f"{args.repeats} repeats of fits of {args.short} and {args.long} steps, interleaved, one process; "
        f"torch {torch.__version__}, 1 thread; load average {load[0]:.2f} before, {os.getloadavg()[0]:.2f} after\n"
    )
    print("| workload | contestant | per step | vs raw | per fit (no step) |")
    print("|---|---|---:|---:|---:|")
    for workload, row in rows.items():
        raw_step = row["raw"][0]
        for contestant, (per_step, fixed) in row.items():
            print(
                f"| {workload} | {contestant} | {per_step * 1e6:.1f} µs | {per_step / raw_step:.3f}x "
                f"| {fixed * 1e3:.1f} ms |"
            )


if __name__ == "__main__":
    main()
