"""A job for the torchmetrics tests: `python metrics_script.py --devices N --out DIR`.

It validates a fixed linear model on 30 samples, logging a macro F1 (not a mean of batch values,
so a wrong reduction shows) and a sample count; every rank writes what it saw to DIR/rank{r}.pt.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torchmetrics
from torch.utils.data import DataLoader, TensorDataset

import surge


class Scored(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 3)
        self.f1 = torchmetrics.classification.MulticlassF1Score(num_classes=3, average="macro")
        self.seen = torchmetrics.SumMetric()

    def forward(self, x):
        return self.lin(x)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.f1(self(x), y)
        self.seen.update(torch.tensor(float(len(x))))
        self.log("val_f1", self.f1)
        self.log("val_seen", self.seen)


def dataset() -> TensorDataset:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(30, 4, generator=g)
    return TensorDataset(x, torch.randint(0, 3, (30,), generator=g))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    trainer = surge.Trainer(
        accelerator="cpu", devices=args.devices, logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False,
    )  # fmt: skip
    model = Scored()
    first = trainer.validate(model, dataloaders=DataLoader(dataset(), batch_size=4))[0]
    again = trainer.validate(model, dataloaders=DataLoader(dataset(), batch_size=4))[0]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.save({"first": first, "again": again, "world_size": trainer.world_size},
               out / f"rank{trainer.global_rank}.pt")  # fmt: skip


if __name__ == "__main__":
    main()
