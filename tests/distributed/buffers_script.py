"""A job for the DDP buffer tests: `python buffers_script.py --out DIR [--broadcast-buffers 0]`.

Two ranks fit a BatchNorm model (each rank's training batches differ, so do the running statistics
each computes) with a sanity check and a validation each epoch; every validation step records the
BatchNorm buffers it ran with. Every rank writes them to DIR/rank{r}.pt, rank 0 also its final ones.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import surge
from surge.strategies import DDPStrategy


class Normed(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
        self.seen: list[dict[str, torch.Tensor]] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        bn = self.net[1]
        self.seen.append({"mean": bn.running_mean.clone(), "var": bn.running_var.clone()})
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def data(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 4, generator=g) * 3 + 1, torch.randint(0, 2, (n,), generator=g))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--broadcast-buffers", type=int, default=1)
    args = p.parse_args()
    torch.manual_seed(0)
    model = Normed()
    trainer = surge.Trainer(
        accelerator="cpu", devices=2, strategy=DDPStrategy(broadcast_buffers=bool(args.broadcast_buffers)),
        max_epochs=3, logger=False, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, num_sanity_val_steps=1,
    )  # fmt: skip
    trainer.fit(model, DataLoader(data(64, 1), batch_size=8), DataLoader(data(16, 2), batch_size=8))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bn = model.net[1]
    final = {"mean": bn.running_mean.clone(), "var": bn.running_var.clone()}
    torch.save({"seen": model.seen, "final": final}, out / f"rank{trainer.global_rank}.pt")


if __name__ == "__main__":
    main()
