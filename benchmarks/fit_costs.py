"""What a fit pays once, part by part: short fits of surge's defaults with one part left out at a time.

    PYTHONPATH=src python benchmarks/fit_costs.py --repeats 15

`run.py` divides a whole fit's time by its steps, so a fixed cost (the run directory, the loggers'
files, the fit-end checkpoint, the first step's FLOP count) counts as per-step overhead there: in a
500-step fit of the tiny MLP (about 0.25 s), 2.5 ms is 1%. Here each configuration trains fits of
`--steps` optimizer steps (10 by default: almost all fixed cost) on the tiny MLP of `workloads.py`,
interleaved with the others and the hand-written loop, in this one process after two warm-up fits
each. "saves" is the defaults' median wall time less the configuration's: what the part left out
costs a fit. A configuration is surge's defaults (`Trainer(max_steps=..., default_root_dir=...)`)
with the Trainer arguments shown; "no FLOP count" leaves out the first step's FLOP count (the one
part no Trainer argument turns off: the goodput report's FLOP/s).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
import child  # noqa: E402
import workloads  # noqa: E402

BENCHMARK = dict(
    logger=False, enable_checkpointing=False, enable_model_summary=False, enable_progress_bar=False
)
CONFIGS: dict[str, dict[str, Any] | None] = {
    "hand-written loop": None,
    "defaults": {},
    "no checkpointing": {"enable_checkpointing": False},
    "no loggers": {"logger": False},
    "no model summary": {"enable_model_summary": False},
    "no progress bar": {"enable_progress_bar": False},
    "no FLOP count": {"_no_flop_count": True},
    "run.py's surge settings": BENCHMARK,
}


def fit_seconds(name: str, workload: str, steps: int) -> float:
    args = CONFIGS[name]
    workloads.seed_everything()
    if args is None:
        fit, _ = child.raw_contestant(workload, steps)
    else:
        import surge
        from surge.profiler.flops import StepFlops

        args = dict(args)
        uncounted = args.pop("_no_flop_count", False)
        model = child.module_class(surge.Module, workload)()
        loader = workloads.make_loader(workload)
        trainer = surge.Trainer(
            max_steps=steps, max_epochs=1000, accelerator="cpu", default_root_dir=tempfile.mkdtemp(),
            accumulate_grad_batches=workloads.TRAINING[workload].accumulate, **args,
        )  # fmt: skip
        counted = StepFlops.instrument
        if uncounted:  # the loop's parts as they are, unwrapped
            StepFlops.instrument = lambda self, parts, manual=False: parts  # type: ignore[method-assign]

        def fit() -> None:
            try:
                trainer.fit(model, train_dataloaders=loader)
            finally:
                StepFlops.instrument = counted  # type: ignore[method-assign]

    start = time.perf_counter()
    fit()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="mlp")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(1)
    load = os.getloadavg()[0]
    times: dict[str, list[float]] = {name: [] for name in CONFIGS}
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        for name in CONFIGS:  # warm-up: first-call costs out of the timings
            fit_seconds(name, args.workload, args.steps)
            fit_seconds(name, args.workload, args.steps)
        for _ in range(args.repeats):
            for name in CONFIGS:
                times[name].append(fit_seconds(name, args.workload, args.steps))
    medians = {name: statistics.median(t) for name, t in times.items()}
    print(
        f"{args.repeats} repeats of {args.steps}-step fits of {args.workload}, interleaved, one process; "
        f"torch {torch.__version__}, 1 thread; load average {load:.2f} before, {os.getloadavg()[0]:.2f} after\n"
    )
    print("| configuration | fit (median) | saves against the defaults |")
    print("|---|---:|---:|")
    for name, median in medians.items():
        print(f"| {name} | {median * 1e3:.2f} ms | {(medians['defaults'] - median) * 1e3:+.2f} ms |")


if __name__ == "__main__":
    main()
