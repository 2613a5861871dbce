"""What a logs folder with many runs costs a fit's start: the sweep for dead writers' temporaries.

    PYTHONPATH=src python benchmarks/logs_folder.py --runs 10,100,1000

A logger resolving its run directory (`version_N` under `save_dir/name`) sweeps every run directory
there, and its subdirectories, for temporaries a killed writer left (`loggers/base.py`). Here a
folder holds `--runs` runs laid out as a default fit leaves them (`hparams.yaml`, `metrics.csv`, a
TensorBoard event file, `checkpoints/last.ckpt`), and one process times, per folder size: the sweep
the first `CSVLogger(...).version` of the process (which sweeps), a second one in the same process
(a second fit: a notebook, a tuner), and then the sweep alone. Medians of `--repeats` fresh folders' timings each; one
process per folder size, so "first" is really the process's first.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import sys, time, json
from pathlib import Path
from surge.loggers import CSVLogger
from surge.loggers.base import remove_stale_run_temporaries
import surge.checkpoint  # (and torch): imported before the clock starts
root = Path(sys.argv[1])
t = time.perf_counter(); CSVLogger(root, name="lightning_logs").version; first = time.perf_counter() - t
t = time.perf_counter(); CSVLogger(root, name="lightning_logs").version; second = time.perf_counter() - t
t = time.perf_counter(); remove_stale_run_temporaries(root / "lightning_logs"); sweep = time.perf_counter() - t
print(json.dumps({"first": first, "second": second, "sweep": sweep}))
"""


def make_folder(root: Path, runs: int) -> None:
    """`runs` run directories as a default fit leaves them."""
    for n in range(runs):
        run = root / "lightning_logs" / f"version_{n}"
        (run / "checkpoints").mkdir(parents=True)
        for name in ("hparams.yaml", "metrics.csv", f"events.out.tfevents.{n}.host.1.0"):
            (run / name).write_text("x")
        (run / "checkpoints" / "last.ckpt").write_bytes(b"x")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", default="10,100,1000", help="folder sizes, comma-separated")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows = []
    for runs in [int(r) for r in args.runs.split(",")]:
        timings: dict[str, list[float]] = {"first": [], "second": [], "sweep": []}
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as root:
                make_folder(Path(root), runs)
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, root], capture_output=True, text=True, check=True
                )
                for key, value in json.loads(out.stdout).items():
                    timings[key].append(value)
        row = {"runs": runs, **{k: statistics.median(v) * 1e3 for k, v in timings.items()}}
        rows.append(row)
    print(f"{args.repeats} fresh folders per size; median ms\n")
    print(
        "| runs in the folder | first logger of the process | second logger | the sweep alone, after them |"
    )
    print("|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['runs']} | {row['first']:.2f} | {row['second']:.2f} | {row['sweep']:.2f} |")


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"\ntook {time.perf_counter() - start:.0f} s")
