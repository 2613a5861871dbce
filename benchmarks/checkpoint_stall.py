"""How long a checkpoint stalls training: `async_checkpoint=False` vs `True`.

    PYTHONPATH=src nice -n 10 python benchmarks/checkpoint_stall.py

A wide MLP of about 100M parameters (`--width` 5000, `--layers` 4) trains with SGD (momentum, so the
checkpoint holds the weights and one state tensor per weight: about 800 MB) and saves every
`--every` steps to a temporary directory (`--dir`, default: the system's). Each step's wall time is
taken at `on_train_batch_end` (with a CUDA synchronisation there, so the time is the device's).
The stall of a save is the longest step minus the median step. Also printed: the time the training
thread spends copying the state off the device (the snapshot, async only) and the time of a write
(`save_atomic`: torch.save, fsync, digest, rename). The table goes to stdout and
benchmarks/results/checkpoint_stall.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import surge
from surge.checkpoint import save_atomic
from surge.checkpoint.writer import AsyncCheckpointWriter, CheckpointWriter

RESULTS = Path(__file__).resolve().parent / "results"


class Wide(surge.Module):
    def __init__(self, width: int, layers: int) -> None:
        super().__init__()
        blocks = [m for _ in range(layers) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())]
        self.net = torch.nn.Sequential(*blocks)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.net(batch[0]).square().mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=1e-6, momentum=0.9)


class StepTimes(surge.callbacks.Callback):
    def __init__(self) -> None:
        self.times: list[float] = []
        self._last = 0.0

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        if not self.times and not self._last:
            self._last = self._now()

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        now = self._now()
        self.times.append(now - self._last)
        self._last = now

    @staticmethod
    def _now() -> float:
        if torch.cuda.is_available():
            torch.cuda.synchronize()  # the benchmark's own sync: step times are the device's
        return time.perf_counter()


def _timed_writer(asynchronous: bool, writes: list[float], copies: list[float]) -> CheckpointWriter:
    def write(state: dict[str, Any], path: Path) -> Path:
        start = time.perf_counter()
        out = save_atomic(state, path)
        writes.append(time.perf_counter() - start)
        return out

    if not asynchronous:
        return CheckpointWriter(write)

    class Timed(AsyncCheckpointWriter):
        def save(self, state: dict[str, Any], path: str | Path) -> None:
            self.wait()  # not counted as copy time (the previous write, if any, is still running)
            start = time.perf_counter()
            super().save(state, path)
            copies.append(time.perf_counter() - start)

    return Timed(write)


def run(asynchronous: bool, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    model = Wide(args.width, args.layers)
    data = torch.utils.data.TensorDataset(torch.randn(args.batch * args.steps, args.width))
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch)
    times, writes, copies = StepTimes(), [], []
    ckpt = surge.callbacks.ModelCheckpoint(dirpath=folder, every_n_train_steps=args.every, save_top_k=1)
    trainer = surge.Trainer(
        max_steps=args.steps, logger=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0, callbacks=[ckpt, times], async_checkpoint=asynchronous,
    )  # fmt: skip
    trainer.strategy.use_checkpoint_writer(_timed_writer(asynchronous, writes, copies))
    trainer.fit(model, loader)
    steps = times.times[1:]  # the first step includes warm-up
    median = statistics.median(steps)
    return {
        "mode": "async" if asynchronous else "sync",
        "params_M": sum(p.numel() for p in model.parameters()) / 1e6,
        "median_step_s": median,
        "max_step_s": max(steps),
        "stall_s": max(steps) - median,
        "copy_s": statistics.median(copies) if copies else 0.0,
        "write_s": statistics.median(writes),
        "saves": len(writes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--width", type=int, default=5000)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="where checkpoints go (default: a temp dir)")
    args = parser.parse_args()
    rows = []
    for asynchronous in (False, True):
        with tempfile.TemporaryDirectory(dir=args.dir) as folder:
            rows.append(run(asynchronous, args, Path(folder)))
    head = (
        "| mode | params | median step | max step | stall (max - median) | copy (snapshot) | write | saves |"
    )
    print(head + "\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['mode']} | {r['params_M']:.0f}M | {r['median_step_s']:.3f} s | {r['max_step_s']:.3f} s | "
            f"{r['stall_s']:.3f} s | {r['copy_s']:.3f} s | {r['write_s']:.3f} s | {r['saves']} |"
        )
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    meta = {"device": device, "torch": torch.__version__, "args": {k: str(v) for k, v in vars(args).items()}}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "checkpoint_stall.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
