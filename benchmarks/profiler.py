"""What `profiler="simple"` costs: the same surge fit with no profiler and with the simple one.

    python benchmarks/profiler.py --repeats 5 --steps 300

Both contestants run in this process, alternating (order flipped each repeat), each a fresh model
and loader; the timed fit follows a short warm-up fit. The simple profiler runs with its doctor
(report, doctor.json, doctor.png) but without the num_workers measurement, whose cost depends on
the dataset, not on the profiler. The loop is timed from its first step to its last (a callback);
what fit spends outside it (set-up, and for the profiled run the doctor's report) is reported
apart, once per fit. Results: benchmarks/results/profiler.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workloads  # noqa: E402
from child import module_class  # noqa: E402

import surge  # noqa: E402
from surge.profiler import SimpleProfiler  # noqa: E402


def one_fit(workload: str, steps: int, profiled: bool, root: str) -> float:
    workloads.seed_everything()
    model = module_class(surge.Module, workload)()
    loader = workloads.make_loader(workload)

    def trainer(n: int) -> surge.Trainer:
        return surge.Trainer(
            max_steps=n, max_epochs=1000, accelerator="cpu", logger=profiled, enable_checkpointing=False,
            enable_model_summary=False, enable_progress_bar=False, num_sanity_val_steps=0, default_root_dir=root,
            profiler=SimpleProfiler(measure_workers=False) if profiled else None,
        )  # fmt: skip

    trainer(20).fit(model, train_dataloaders=loader)  # warm-up
    clock = LoopClock(steps)
    timed = trainer(steps)
    timed.callbacks.insert(0, clock)
    t0 = time.perf_counter()
    timed.fit(model, train_dataloaders=loader)
    REPORT_S.append(time.perf_counter() - t0 - (clock.end - clock.start))
    return (clock.end - clock.start) / steps


REPORT_S: list[float] = []  # fit time outside the loop (set-up, and the doctor's report when profiled)


class LoopClock(surge.callbacks.Callback):
    """Times the training loop alone: from the first step's start to the last step's end."""

    def __init__(self, steps: int) -> None:
        self.steps, self.start, self.end = steps, 0.0, 0.0

    def on_train_start(self, trainer, module) -> None:
        self.start = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.steps:
            self.end = time.perf_counter()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--only", default="cnn,mlp")
    args = p.parse_args()
    torch.set_num_threads(1)
    results = {}
    root = tempfile.mkdtemp(prefix="surge_prof_bench_")
    for workload in args.only.split(","):
        runs: dict[str, list[float]] = {"none": [], "simple": []}
        reports: list[float] = []
        for r in range(args.repeats):
            order = ("none", "simple") if r % 2 == 0 else ("simple", "none")
            for name in order:
                runs[name].append(one_fit(workload, args.steps, name == "simple", root))
                if name == "simple":
                    reports.append(REPORT_S[-1])
        med = {k: statistics.median(v) for k, v in runs.items()}
        results[workload] = {
            "median_s_per_step": med, "runs": runs, "overhead": med["simple"] / med["none"],
            "report_s": statistics.median(reports),
        }  # fmt: skip
        print(f"| {workload} | {med['none'] * 1e6:,.0f} µs | {med['simple'] * 1e6:,.0f} µs | "
              f"{results[workload]['overhead']:.3f}x | {results[workload]['report_s']:.2f} s |", flush=True)  # fmt: skip
    out = Path(__file__).resolve().parent / "results" / "profiler.json"
    out.write_text(
        json.dumps({"steps": args.steps, "repeats": args.repeats, "results": results}, indent=2) + "\n"
    )


if __name__ == "__main__":
    main()
