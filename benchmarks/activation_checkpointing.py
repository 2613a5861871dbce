"""Activation checkpointing on CPU: peak memory and step time with and without it.

`nice -n 10 python benchmarks/activation_checkpointing.py [--blocks 12 --width 256 --tokens 1024]`

Each setting trains in a fresh child process (one thread) with surge: a deep residual MLP of
pre-norm blocks (LayerNorm, Linear 4x, GELU, Linear). Memory is the child's highest resident set
over the timed steps, sampled every 0.5 ms by a thread, minus its resident set when they start
(weights, gradients and data are in that base; glibc is told to map large blocks directly,
MALLOC_MMAP_THRESHOLD_, so freed activations leave the resident set at once). Time is the mean
of the timed steps. Both are noisy on a shared machine: repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PEAK = "peak_mb_over_step_start"


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _model(args: argparse.Namespace) -> tuple[type, object]:
    """The block class and the surge.Module of `--blocks` of them."""
    import torch
    from torch import nn

    import surge

    class Block(nn.Module):
        def __init__(self, width: int) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(width)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.mlp(self.norm(x))

    class Deep(surge.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.Sequential(*[Block(args.width) for _ in range(args.blocks)])

        def training_step(self, batch, batch_idx):
            return self.blocks(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-3)

    return Block, Deep()


def child(args: argparse.Namespace) -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import surge

    class StepTimes(surge.callbacks.Callback):
        """Step start times; from the first timed step, a thread samples the resident set."""

        def __init__(self) -> None:
            self.starts: list[float] = []
            self.base_mb, self.peak_mb, self.done = 0.0, 0.0, threading.Event()

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            self.starts.append(time.perf_counter())
            if batch_idx == args.warmup:  # all imported and allocated once: measure from here
                self.base_mb = self.peak_mb = _status_mb("VmRSS:")
                threading.Thread(target=self.sample, daemon=True).start()

        def sample(self) -> None:
            while not self.done.wait(0.0005):
                self.peak_mb = max(self.peak_mb, _status_mb("VmRSS:"))

    torch.manual_seed(0)
    steps = args.warmup + args.steps
    data = DataLoader(TensorDataset(torch.randn(steps * args.tokens, args.width)), batch_size=args.tokens)
    block, model = _model(args)
    times = StepTimes()
    trainer = surge.Trainer(
        max_steps=steps, activation_checkpointing=[block] if args.child == "on" else None, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, callbacks=[times],
    )  # fmt: skip
    trainer.fit(model, data)
    end = time.perf_counter()
    times.done.set()
    timed = [*times.starts[args.warmup :], end]
    step_ms = (timed[-1] - timed[0]) / (len(timed) - 1) * 1e3
    peak = times.peak_mb - times.base_mb
    print(json.dumps({"activation_checkpointing": args.child, "peak_mb_over_step_start": round(peak, 1),
                      "step_ms": round(step_ms, 1)}))  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--blocks", type=int, default=12)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--tokens", type=int, default=1024, help="rows per batch")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--child", choices=["off", "on"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MALLOC_MMAP_THRESHOLD_": "65536",  # freed activations leave the resident set at once
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    }
    rows = {}
    for mode in ("off", "on"):
        argv = [sys.executable, __file__, "--child", mode, *sys.argv[1:]]
        out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
        rows[mode] = json.loads(out.strip().splitlines()[-1])
        print(json.dumps(rows[mode]))
    off, on = rows["off"], rows["on"]
    print(
        f"peak memory over a step's start: {off[PEAK]:.0f} MB -> {on[PEAK]:.0f} MB ({on[PEAK] / off[PEAK]:.2f}x); "
        f"step time {off['step_ms']:.0f} ms -> {on['step_ms']:.0f} ms ({on['step_ms'] / off['step_ms']:.2f}x)"
    )


if __name__ == "__main__":
    main()
