"""Where the per-step time of surge's default configuration goes, measured in one process.

`PYTHONPATH=src python benchmarks/step_parts.py --rounds 7`

Each round runs, in a shuffled order, the hand-written loop and surge's fit in several
configurations on the tiny MLP of `workloads.py` (one epoch of 500 batches; one warm-up run of
each first), and records the CPU time (`time.process_time`, less sensitive than wall time to other
processes on the machine) of batches 100 to 400: the steady state, log intervals included. The report gives each configuration's median CPU time per step as a ratio
of the hand-written loop's, and the difference between neighbouring configurations is what a part
costs. One process: the same interpreter, torch build and thread setting for every contestant.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
import workloads  # noqa: E402

# Each configuration: (name, Trainer arguments beyond max_epochs=1 and the run directory, logs every step)
BENCHMARK = dict(
    logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    num_sanity_val_steps=0, goodput_report="off",
)  # fmt: skip
CONFIGS: list[tuple[str, dict[str, Any], bool]] = [
    ("benchmark settings", BENCHMARK, False),
    ("+ on_nonfinite=None", {**BENCHMARK, "on_nonfinite": None}, False),
    ("defaults, no loggers", {"logger": False}, False),
    ("defaults, no checkpointing", {"enable_checkpointing": False}, False),
    ("defaults, no progress bar", {"enable_progress_bar": False}, False),
    ("defaults", {}, False),
    ("defaults, self.log every step", {}, True),
]


FIRST, LAST = 100, 400  # the timed window: from batch FIRST's training_step to batch LAST's


class Window:
    """CPU time between the steps of batch FIRST and batch LAST: the steady state, without the
    fit's fixed costs (setup, the first step's FLOP count, the epoch-end checkpoint and reports)."""

    def __init__(self) -> None:
        self.start = self.seconds = 0.0

    def mark(self, batch_idx: int) -> None:
        if batch_idx == FIRST:
            self.start = time.process_time()
        elif batch_idx == LAST:
            self.seconds = time.process_time() - self.start

    def per_step(self) -> float:
        return self.seconds / (LAST - FIRST)


def surge_fit(trainer_args: dict[str, Any], log: bool, root: Path) -> float:
    import surge

    window = Window()

    class Timed(surge.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = workloads.build_model("mlp")

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            window.mark(batch_idx)
            loss = workloads.compute_loss(self.net, batch)
            if log:
                self.log("loss", loss, prog_bar=True)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return workloads.make_optimizer("mlp", self.parameters())

    trainer = surge.Trainer(max_epochs=1, default_root_dir=root, **trainer_args)
    trainer.fit(Timed(), train_dataloaders=workloads.make_loader("mlp"))
    return window.per_step()


def raw_fit() -> float:
    """The hand-written loop of `child.py`, over one epoch."""
    window = Window()
    net = workloads.build_model("mlp")
    opt = workloads.make_optimizer("mlp", net.parameters())
    net.train()
    for batch_idx, batch in enumerate(workloads.make_loader("mlp")):
        window.mark(batch_idx)
        loss = workloads.compute_loss(net, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return window.per_step()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    torch.set_num_threads(1)
    logging.disable(logging.WARNING)
    root = Path(tempfile.mkdtemp(prefix="step_parts_"))
    runs: dict[str, Callable[[], float]] = {"hand-written loop": raw_fit}
    for i, (name, kw, log) in enumerate(CONFIGS):
        runs[name] = partial(surge_fit, kw, log, root / str(i))
    times: dict[str, list[float]] = {name: [] for name in runs}
    for run in runs.values():  # warm-up: imports, first-call costs, allocator
        run()
    load = os.getloadavg()
    for _ in range(args.rounds):
        order = list(runs)
        random.shuffle(order)
        for name in order:
            times[name].append(runs[name]())
    raw = statistics.median(times["hand-written loop"])
    print(
        f"{args.rounds} rounds; {LAST - FIRST} steps timed per fit; load average {load} before, {os.getloadavg()} after"
    )
    print("| configuration | CPU µs/step (median) | min–max | vs hand-written |")
    print("|---|---:|---:|---:|")
    for name, values in times.items():
        med = statistics.median(values)
        print(
            f"| {name} | {med * 1e6:.0f} | {min(values) * 1e6:.0f}–{max(values) * 1e6:.0f} | {med / raw:.3f}x |"
        )


if __name__ == "__main__":
    main()
