"""Data-bound training: 0 workers vs `Trainer(num_workers="auto")` vs `surge.data.cache`.

    PYTHONPATH=src python benchmarks/workers.py --repeats 3

The dataset's `__getitem__` costs about 1 ms of pure-Python CPU work per sample (a stand-in for
decoding and augmenting); the model is a small MLP, so loading dominates. Each repeat trains
three epochs per contestant and times epochs 2 and 3 (after worker start-up and, for the cache,
after its one-off build, which is timed separately). Contestants run one after another within a
repeat; the median over repeats is printed as a markdown table and written to
benchmarks/results/workers.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

import surge

RESULTS = Path(__file__).resolve().parent / "results"


class Decoded(Dataset):
    """64 floats and a label per sample, after ~1 ms of Python work."""

    def __init__(self, n: int, work: int) -> None:
        self.n, self.work = n, work

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        acc = 0
        for k in range(self.work):
            acc = (acc + k * i) % 1_000_003
        g = torch.Generator().manual_seed(i)
        x = torch.randn(64, generator=g) + acc * 1e-9
        return x, i % 10


class MLP(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


class EpochClock(surge.callbacks.Callback):
    def __init__(self) -> None:
        self.times: list[float] = []

    def on_train_epoch_start(self, trainer, module) -> None:
        self._t0 = time.perf_counter()

    def on_train_epoch_end(self, trainer, module) -> None:
        self.times.append(time.perf_counter() - self._t0)


def train(dataset: Dataset, batch_size: int, epochs: int, **trainer_args) -> tuple[float, surge.Trainer]:
    """Samples/s of epochs 2.. of a fit."""
    clock = EpochClock()
    trainer = surge.Trainer(
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[clock],
        **trainer_args,
    )
    torch.manual_seed(0)
    trainer.fit(MLP(), DataLoader(dataset, batch_size=batch_size, shuffle=True))
    return len(dataset) * (epochs - 1) / sum(clock.times[1:]), trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--samples", type=int, default=960)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--work", type=int, default=12_000, help="loop iterations per sample (~1 ms)")
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dataset = Decoded(args.samples, args.work)
    runs: dict[str, list[float]] = {"0 workers": [], "num_workers='auto'": [], "cached, 0 workers": []}
    chosen, build = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            rate, _ = train(dataset, args.batch_size, args.epochs)
            runs["0 workers"].append(rate)
            rate, trainer = train(dataset, args.batch_size, args.epochs, num_workers="auto")
            runs["num_workers='auto'"].append(rate)
            chosen.append(trainer.train_dataloader.num_workers)
            t0 = time.perf_counter()
            cached = surge.data.cache(dataset, Path(tmp) / f"c{r}", progress=False)
            build.append(time.perf_counter() - t0)
            rate, _ = train(cached, args.batch_size, args.epochs)
            runs["cached, 0 workers"].append(rate)
            print(
                f"repeat {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}/s" for k, v in runs.items()),
                file=sys.stderr,
            )
    base = statistics.median(runs["0 workers"])
    print(
        f"\n{os.cpu_count()} CPUs, torch {torch.__version__}, {args.repeats} repeats (median), "
        f"{args.samples} samples, batch {args.batch_size}, epochs 2-{args.epochs} timed\n"
    )
    print("| loader | samples/s (median) | vs 0 workers | runs |")
    print("|---|---|---|---|")
    for name, rates in runs.items():
        med = statistics.median(rates)
        print(f"| {name} | {med:,.0f} | {med / base:.2f}x | {', '.join(f'{x:,.0f}' for x in rates)} |")
    print(
        f"\nauto chose num_workers={chosen}; cache build (in workers) {', '.join(f'{b:.2f}' for b in build)} s"
    )
    RESULTS.mkdir(exist_ok=True)
    summary = {name: statistics.median(rates) for name, rates in runs.items()}
    (RESULTS / "workers.json").write_text(
        json.dumps(
            {"args": vars(args), "runs": runs, "median": summary, "chosen": chosen, "build_s": build},
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
