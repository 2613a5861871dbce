"""End-to-end fit time with `Trainer(num_workers="auto")` (its measurement included) against each
fixed setting, at three job lengths.

    PYTHONPATH=src python benchmarks/workers_auto.py --repeats 3 --long-repeats 1

The dataset's `__getitem__` costs about 0.5 ms of pure-Python CPU work per sample (see
`workers.py`); the model is a small MLP, so loading dominates. Each length trains the same
2,560-sample dataset for more epochs: as many as make its loading take ~2.5 s, ~60 s and
~150 s at 0 workers, from the `__getitem__` time measured when the run starts (the machine is
shared, so a busy machine gets fewer epochs rather than a longer run).
Every contestant is a fresh `Trainer(num_workers=...)` fit timed from `fit()` to its return;
contestants run one after another, each repeat starting with the next one (auto, 0, 1, 2, then
0, 1, 2, auto, ...), and the median over repeats is
reported with the best fixed setting in hindsight. Writes benchmarks/results/workers_auto.json
(after each length, so a long run that is stopped keeps what it measured).
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader
from workers import MLP, Decoded

import surge

RESULTS = Path(__file__).resolve().parent / "results"
LENGTHS = {"seconds": 2.5, "about a minute": 60.0, "several minutes": 150.0}  # loading time at 0 workers
FIXED = (0, 1, 2)


class Said(logging.Handler):
    """Keeps what surge says about num_workers='auto'."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "num_workers='auto'" in record.getMessage():
            self.lines.append(record.getMessage())


def fit_seconds(dataset: Decoded, batch_size: int, epochs: int, setting: int | str) -> tuple[float, int]:
    """Wall time of one fit, and the train loader's worker count it ran with."""
    trainer = surge.Trainer(
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        num_workers=setting,
    )
    torch.manual_seed(0)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True)
    start = time.perf_counter()
    trainer.fit(MLP(), loader)
    seconds, count = time.perf_counter() - start, trainer.train_dataloader.num_workers
    del trainer, loader
    gc.collect()  # the fit's persistent workers end here, not inside the next fit's forked workers
    return seconds, count


def sample_ms(dataset: Decoded, n: int = 200) -> float:
    start = time.perf_counter()
    for i in range(n):
        dataset[i]
    return (time.perf_counter() - start) / n * 1e3


def run_length(dataset: Decoded, args: argparse.Namespace, name: str, epochs: int, repeats: int) -> dict:
    said = Said()
    logging.getLogger("surge").addHandler(said)
    logging.getLogger("surge").setLevel(logging.INFO)
    times: dict[str, list[float]] = {"auto": [], **{str(n): [] for n in FIXED}}
    chosen: list[int] = []
    order: list[int | str] = ["auto", *FIXED]
    for r in range(repeats):
        for setting in order[r % len(order) :] + order[: r % len(order)]:  # each repeat starts elsewhere
            seconds, count = fit_seconds(dataset, args.batch_size, epochs, setting)
            times[str(setting)].append(seconds)
            if setting == "auto":
                chosen.append(count)
                print(said.lines[-1] if said.lines else "(auto said nothing)", file=sys.stderr)
        print(
            f"{name} repeat {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()),
            file=sys.stderr,
        )
    logging.getLogger("surge").removeHandler(said)
    median = {k: statistics.median(v) for k, v in times.items()}
    best = min(FIXED, key=lambda n: median[str(n)])
    return {
        "epochs": epochs,
        "batches": epochs * len(dataset) // args.batch_size,
        "repeats": repeats,
        "times": times,
        "median": median,
        "best_fixed": best,
        "auto_vs_best": median["auto"] / median[str(best)],
        "chosen": chosen,
        "said": said.lines,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="repeats of the seconds-long job")
    parser.add_argument("--long-repeats", type=int, default=1, help="repeats of the longer jobs")
    parser.add_argument("--samples", type=int, default=2560)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--work", type=int, default=8_000, help="loop iterations per sample (~0.5 ms)")
    parser.add_argument("--out", default="workers_auto.json", help="file name under benchmarks/results/")
    parser.add_argument("--only", default=",".join(LENGTHS), help="comma-separated lengths to run")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dataset = Decoded(args.samples, args.work)
    ms = sample_ms(dataset)
    load = os.getloadavg()[0]
    results = {}
    meta = {"args": vars(args), "cpus": os.cpu_count(), "load_before": load, "sample_ms": ms}
    RESULTS.mkdir(exist_ok=True)
    for name in args.only.split(","):
        repeats = args.repeats if name == "seconds" else args.long_repeats
        epochs = max(1, round(LENGTHS[name] / (args.samples * ms / 1e3)))
        results[name] = run_length(dataset, args, name, epochs, repeats)
        (RESULTS / args.out).write_text(json.dumps({**meta, "lengths": results}, indent=1))
    print(
        f"\n{os.cpu_count()} CPUs, torch {torch.__version__}, load average {load:.2f} before, "
        f"__getitem__ {ms:.2f} ms, {args.samples} samples, batch {args.batch_size}\n"
    )
    print("| job | epochs (batches) | repeats | auto (chose) | 0 | 1 | 2 | best fixed | auto vs best |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        m = r["median"]
        verdict = "PASS" if r["auto_vs_best"] <= 1.10 else "FAIL"
        print(
            f"| {name} | {r['epochs']} ({r['batches']:,}) | {r['repeats']} | {m['auto']:.2f} s "
            f"({', '.join(map(str, r['chosen']))}) | "
            + " | ".join(f"{m[str(n)]:.2f} s" for n in FIXED)
            + f" | {r['best_fixed']} | {r['auto_vs_best']:.2f}x ({verdict}) |"
        )
    for name, r in results.items():
        print(f"\n{name}: " + " / ".join(r["said"][:1]))


if __name__ == "__main__":
    main()
