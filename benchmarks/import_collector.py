"""Where the names' import time goes: surge's own work, and the garbage collector's passes in it.

    python benchmarks/import_collector.py --repeats 15

torch's import leaves a full pass of the garbage collector due: about 11,000 tracked objects made
after it set that pass off (Python 3.11, torch 2.13), and it walks every object torch made. Whatever
runs next pays for it. Each run here is a fresh interpreter that imports torch, then times
`from surge import Module, Trainer`, with `gc.callbacks` timing every collector pass inside that
import by generation. `--after-pass` first runs the due pass (`gc.collect()`) right after torch's
import, so the names' time is surge's own plus the young passes its own objects bring on. The
report gives medians over the runs (each run in its own process, the two variants interleaved).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
CHILD = """\
import gc, json, sys, time
import torch
if {after_pass}:
    gc.collect()
spent = {{0: 0.0, 1: 0.0, 2: 0.0}}
count = {{0: 0, 1: 0, 2: 0}}
began = [0.0]
def watch(phase, info):
    if phase == "start":
        began[0] = time.perf_counter()
    else:
        spent[info["generation"]] += time.perf_counter() - began[0]
        count[info["generation"]] += 1
gc.callbacks.append(watch)
start = time.perf_counter()
from surge import Module, Trainer
took = time.perf_counter() - start
gc.callbacks.remove(watch)
print(json.dumps({{"names": took, "spent": spent, "count": count}}))
"""


def run(after_pass: bool, env: dict[str, str]) -> dict:
    code = CHILD.format(after_pass=after_pass)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="fresh interpreters per variant")
    args = parser.parse_args()
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(SRC)], check=True)  # as pip installs it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    runs: dict[bool, list[dict]] = {False: [], True: []}
    load_before = os.getloadavg()
    for _ in range(args.repeats):
        for after_pass in (False, True):
            runs[after_pass].append(run(after_pass, env))
    load_after = os.getloadavg()
    print(
        f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{args.repeats} runs of each, interleaved; load average "
        f"{' '.join(f'{x:.2f}' for x in load_before)} before, {' '.join(f'{x:.2f}' for x in load_after)} after\n"
    )
    print(
        "| after `import torch` | the names' import | in full passes | in young and middle passes | the rest (surge's own) | full / young+middle passes |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for after_pass, label in ((False, "nothing"), (True, "`gc.collect()` (the due pass, run first)")):
        rs = runs[after_pass]
        names = statistics.median(r["names"] for r in rs)
        full = statistics.median(r["spent"]["2"] for r in rs)
        young = statistics.median(r["spent"]["0"] + r["spent"]["1"] for r in rs)
        rest = statistics.median(r["names"] - sum(r["spent"].values()) for r in rs)
        passes = statistics.median(r["count"]["2"] for r in rs)
        small = statistics.median(r["count"]["0"] + r["count"]["1"] for r in rs)
        print(
            f"| {label} | {names * 1000:.1f} ms | {full * 1000:.1f} ms | {young * 1000:.1f} ms "
            f"| {rest * 1000:.1f} ms | {passes:g} / {small:g} |"
        )


if __name__ == "__main__":
    main()
