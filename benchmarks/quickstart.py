"""The README's quickstart as a user runs it: `python -m surge.demo` in a fresh directory, timed.

    python benchmarks/quickstart.py --repeats 3 [--threads 1,2]

Each repeat starts a new interpreter (imports included, as a user's first run pays them) in an empty
directory and reads, from the demo's own report, the final validation and test accuracies. Wall
time is from the process's start to its exit; CPU time is the child's user + system seconds. With
`--threads`, each repeat runs once per `OMP_NUM_THREADS` value (interleaved), to see what torch's
intra-op threads buy on this model. Writes benchmarks/results/quickstart.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
ACCURACY = re.compile(r"^(Final validation|Test \(held out\)):\s+accuracy ([\d.]+)%", re.M)


def run_demo(threads: str | None) -> dict[str, float]:
    """One `python -m surge.demo` in a fresh directory: wall and CPU seconds, the two accuracies."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    if threads is not None:
        env["OMP_NUM_THREADS"] = threads
    with tempfile.TemporaryDirectory(prefix="surge_quickstart_") as cwd:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "surge.demo"], cwd=cwd, env=env, capture_output=True, text=True
        )
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"python -m surge.demo failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    found = dict(ACCURACY.findall(proc.stdout + proc.stderr))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "val_acc": float(found["Final validation"]) / 100,
        "test_acc": float(found["Test (held out)"]) / 100,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--threads", default=None, help="comma-separated OMP_NUM_THREADS values (default: torch's own)"
    )
    args = parser.parse_args()
    settings = args.threads.split(",") if args.threads else [None]
    runs: dict[str, list[dict[str, float]]] = {str(t or "default"): [] for t in settings}
    for i in range(args.repeats):
        for threads in settings[i % len(settings) :] + settings[: i % len(settings)]:
            runs[str(threads or "default")].append(run_demo(threads))
            print(f"repeat {i + 1}, threads {threads or 'default'}: {runs[str(threads or 'default')][-1]}")
    print("\n| OMP_NUM_THREADS | wall s (median) | wall s (min-max) | CPU s (median) | val acc | test acc |")
    print("|---|---:|---:|---:|---:|---:|")
    summary = {}
    for name, rs in runs.items():
        walls = [r["wall_s"] for r in rs]
        summary[name] = {
            "wall_median_s": statistics.median(walls),
            "wall_min_s": min(walls),
            "wall_max_s": max(walls),
            "cpu_median_s": statistics.median(r["cpu_s"] for r in rs),
            "runs": rs,
        }
        accs = {(r["val_acc"], r["test_acc"]) for r in rs}
        val = "/".join(f"{v:.2%}" for v in sorted({a[0] for a in accs}))
        test = "/".join(f"{t:.2%}" for t in sorted({a[1] for a in accs}))
        print(
            f"| {name} | {statistics.median(walls):.1f} | {min(walls):.1f}-{max(walls):.1f} | "
            f"{summary[name]['cpu_median_s']:.1f} | {val} | {test} |"
        )
    RESULTS.mkdir(exist_ok=True)
    meta = {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()}
    (RESULTS / "quickstart.json").write_text(json.dumps({"meta": meta, "runs": summary}, indent=2) + "\n")


if __name__ == "__main__":
    main()
