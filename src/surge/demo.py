"""The digits example: a small CNN on scikit-learn's bundled 8x8 digits (no download).

Run it with `python -m surge.demo` (or `python examples/digits.py`, or `surge demo`).
On 2 CPU cores the whole run takes about 17 s (benchmarks/quickstart.py) and reaches about 99%
validation accuracy; the test split, held out from both training and validation, is measured once
at the end.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import surge

from .errors import install_hint

__all__ = ["DigitsCNN", "DigitsData", "main"]  # the public API


class DigitsCNN(surge.Module):
    """Two conv layers and a small classifier head, trained with Adam and a step-decay schedule."""

    def __init__(
        self, lr: float = 2e-3, channels: int = 32, dropout: float = 0.25, decay_every: int = 8
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1), nn.ReLU(),
            nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )  # fmt: skip
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Linear(2 * channels * 16, 128),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(128, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, prog_bar=True, on_epoch=True)
        return loss

    def _evaluate(self, batch: Any, stage: str) -> None:
        x, y = batch
        logits = self(x)
        self.log(f"{stage}_loss", F.cross_entropy(logits, y), prog_bar=True)
        self.log(f"{stage}_acc", (logits.argmax(1) == y).float().mean(), prog_bar=True)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        x = batch[0] if isinstance(batch, list | tuple) else batch
        return self(x).argmax(1)

    def configure_optimizers(self) -> Any:
        opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=self.hparams.decay_every, gamma=0.3)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}


class DigitsData(surge.DataModule):
    """scikit-learn's 1,797 digits, scaled to [0, 1], split into train, validation and test with a
    fixed seed. The test images, without their labels, are also the data to predict."""

    def __init__(
        self, batch_size: int = 64, val_fraction: float = 0.15, test_fraction: float = 0.15, seed: int = 0
    ) -> None:
        super().__init__()
        self.save_hyperparameters()

    def setup(self, stage: str) -> None:
        from sklearn.datasets import load_digits

        digits = load_digits()
        x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
        y = torch.tensor(digits.target, dtype=torch.long)
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(self.hparams.seed))
        n_test = int(len(x) * self.hparams.test_fraction)
        n_val = int(len(x) * self.hparams.val_fraction)
        test, val, train = order[:n_test], order[n_test : n_test + n_val], order[n_test + n_val :]
        self.test = TensorDataset(x[test], y[test])
        self.val = TensorDataset(x[val], y[val])
        self.train = TensorDataset(x[train], y[train])
        self.unlabeled = TensorDataset(x[test])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=256)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test, batch_size=256)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.unlabeled, batch_size=256)


def _arguments(argv: Sequence[str] | None, prog: str | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20, help="epochs to train (default 20)")
    parser.add_argument(
        "--precision", default="32-true", help="32-true (default), bf16-mixed, 16-mixed (CUDA), 64-true"
    )
    parser.add_argument("--root", default=".", help="where surge_logs/ (metrics, checkpoints) is written")
    parser.add_argument(
        "--seed", type=int, default=0, help="seeds the data split, the weights and the shuffle"
    )
    return parser.parse_args(argv)


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _best(checkpoint: surge.callbacks.ModelCheckpoint) -> str:
    if checkpoint.best_model_score is None:  # e.g. `surge doctor` stops the fit before any validation
        return "none (no validation ran during the fit, so no checkpoint was chosen by val_acc)"
    return f"{checkpoint.best_model_path} (val_acc {checkpoint.best_model_score:.4f})"


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> dict[str, float]:
    """Train, report the final validation and test metrics, and say where the files are.

    `prog` names the command in help and errors (default: the running script's name).
    """
    args = _arguments(argv, prog)
    surge.seed_everything(args.seed)
    model, data = DigitsCNN(), DigitsData(seed=args.seed)
    checkpoint = surge.callbacks.ModelCheckpoint(
        monitor="val_acc", mode="max", filename="{epoch}-{val_acc:.4f}", save_last=True
    )
    trainer = surge.Trainer(
        max_epochs=args.epochs,
        precision=args.precision,
        default_root_dir=args.root,
        callbacks=[checkpoint],
        log_every_n_steps=10,
    )
    trainer.fit(model, datamodule=data)
    metrics = trainer.validate(model, datamodule=data)[0]
    # the test split is seen once, with the weights validation chose (the last ones without a best)
    metrics |= trainer.test(model, datamodule=data, ckpt_path="best" if checkpoint.best_model_path else None)[
        0
    ]
    report = "\n".join(
        [
            "",
            f"Final validation: accuracy {metrics['val_acc']:.2%}, loss {metrics['val_loss']:.4f} "
            f"after {_count(trainer.current_epoch, 'epoch')} ({_count(trainer.global_step, 'optimizer step')})",
            f"Test (held out):  accuracy {metrics['test_acc']:.2%}, loss {metrics['test_loss']:.4f}",
            f"Best checkpoint:  {_best(checkpoint)}",
            f"Last checkpoint:  {checkpoint.last_model_path}",
            f"Metrics:          {Path(trainer.log_dir) / 'metrics.csv'}",
        ]
    )
    if trainer.is_global_zero:
        try:
            from .profiler.plotting import plot_run

            report += f"\nCurves:           {plot_run(trainer.log_dir)}"
        except ImportError:
            report += f"\nCurves:           {install_hint('plot')} to draw them (surge plot RUN_DIR)"
    surge.rank_zero.info(report)
    return metrics


if __name__ == "__main__":
    main(prog="python -m surge.demo")
