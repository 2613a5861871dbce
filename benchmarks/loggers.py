"""Step-time cost of each logger: the same fit (the MLP of benchmarks/workloads.py, `self.log`
every step) with no logger, with metrics.csv, with TensorBoard and with MLflow on a real tracking
server (started here, SQLite store), at `log_every_n_steps` 50 (the default) and 1. Steady step
time (after 100 steps, so without the run's set-up and final flush) and the whole fit's time.

    PYTHONPATH=src python benchmarks/loggers.py --steps 2000 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import surge
from surge.loggers import CSVLogger, MLFlowLogger, TensorBoardLogger

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from workloads import build_model, make_loader  # noqa: E402

from servers import mlflow_server  # noqa: E402  (the tests' own server fixture)


class Logged(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = build_model("mlp")

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class StepClock(surge.callbacks.Callback):
    """Times the steps after the first `skip` (steady state: no run set-up, no final flush)."""

    def __init__(self, skip: int = 100) -> None:
        self.skip, self.start, self.end, self.steps = skip, 0.0, 0.0, 0

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.skip:
            self.start = time.perf_counter()
        elif trainer.global_step > self.skip:
            self.end, self.steps = time.perf_counter(), trainer.global_step - self.skip


def fit_times(logger, steps: int, every: int, root: Path) -> tuple[float, float]:
    """(steady ms per step, whole fit in s) for one fit."""
    clock = StepClock()
    trainer = surge.Trainer(
        callbacks=[clock],
        max_steps=steps, log_every_n_steps=every, logger=logger, default_root_dir=root,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        accelerator="cpu", num_sanity_val_steps=0,
    )  # fmt: skip
    start = time.perf_counter()
    trainer.fit(Logged(), make_loader("mlp"))
    whole = time.perf_counter() - start
    return (clock.end - clock.start) / clock.steps * 1e3, whole


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp, mlflow_server(Path(tmp)) as uri:
        root = Path(tmp)
        makers = {
            "none": lambda: False,
            "csv": lambda: CSVLogger(root),
            "tensorboard": lambda: TensorBoardLogger(root),
            "mlflow": lambda: MLFlowLogger(experiment_name="bench", tracking_uri=uri),
        }
        fit_times(makers["mlflow"](), 200, 1, root)  # warm-up: imports, the first fit's costs
        for every in (50, 1):
            steady: dict[str, list[float]] = {name: [] for name in makers}
            whole: dict[str, list[float]] = {name: [] for name in makers}
            for _ in range(args.repeats):  # interleaved, so drift hits every contestant alike
                for name, make in makers.items():
                    ms, s = fit_times(make(), args.steps, every, root)
                    steady[name].append(ms)
                    whole[name].append(s)
            base, base_whole = statistics.median(steady["none"]), statistics.median(whole["none"])
            print(f"\nlog_every_n_steps={every}, {args.steps} steps, median of {args.repeats}")
            print("| logger | ms/step (steady) | vs no logger | whole fit, s | extra per fit, s |")
            print("|---|---|---|---|---|")
            for name in makers:
                ms, s = statistics.median(steady[name]), statistics.median(whole[name])
                print(f"| {name} | {ms:.3f} | {ms / base:.3f}x | {s:.2f} | {s - base_whole:+.2f} |")


if __name__ == "__main__":
    main()
