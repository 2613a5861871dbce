"""A job for the DDP buffer tests: `python buffers_script.py --out DIR [--broadcast-buffers 0]
[--manual 1] [--ckpt-dir DIR] [--resume PATH]`.

Two ranks fit a BatchNorm model (each rank's training batches differ, so do the running statistics
each computes) with a sanity check and a validation each epoch; every validation step records the
BatchNorm buffers it ran with, and its loss. Every rank writes them to DIR/rank{r}.pt, rank 0 also
its final ones, and every rank its final parameters. `--manual 1`: manual optimization (the step
calls manual_backward). `--ckpt-dir`: a checkpoint every 4 steps (mid-epoch: 8 steps an epoch)
and at each epoch's end, all kept. `--resume`: the fit resumes from that checkpoint.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import surge
from surge.callbacks import ModelCheckpoint
from surge.strategies import DDPStrategy


class Normed(surge.Module):
    def __init__(self, manual: bool = False) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
        self.seen: list[dict[str, torch.Tensor]] = []
        self.automatic_optimization = not manual

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        if self.automatic_optimization:
            return loss
        opt = self.optimizers()
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        return None

    def validation_step(self, batch, batch_idx):
        bn = self.net[1]
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.seen.append({"mean": bn.running_mean.clone(), "var": bn.running_var.clone(), "loss": loss})
        self.log("val_loss", loss)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def data(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 4, generator=g) * 3 + 1, torch.randint(0, 2, (n,), generator=g))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--broadcast-buffers", type=int, default=1)
    p.add_argument("--manual", type=int, default=0)
    p.add_argument("--ckpt-dir")
    p.add_argument("--resume")
    args = p.parse_args()
    torch.manual_seed(0)
    model = Normed(manual=bool(args.manual))
    callbacks = []
    if args.ckpt_dir:
        callbacks = [ModelCheckpoint(args.ckpt_dir, "{epoch}-{step}", save_top_k=-1, every_n_train_steps=4)]
    trainer = surge.Trainer(
        accelerator="cpu", devices=2, strategy=DDPStrategy(broadcast_buffers=bool(args.broadcast_buffers)),
        max_epochs=3, logger=False, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=bool(args.ckpt_dir), callbacks=callbacks, num_sanity_val_steps=1,
    )  # fmt: skip
    train, val = DataLoader(data(64, 1), batch_size=4), DataLoader(data(16, 2), batch_size=8)
    trainer.fit(model, train, val, ckpt_path=args.resume)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bn = model.net[1]
    final = {"mean": bn.running_mean.clone(), "var": bn.running_var.clone()}
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    torch.save({"seen": model.seen, "final": final, "params": params}, out / f"rank{trainer.global_rank}.pt")


if __name__ == "__main__":
    main()
