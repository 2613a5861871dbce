"""A job for the activation checkpointing tests: `python ac_script.py --strategy ddp|fsdp [--ac] ...`.

Blocks with dropout, trained with or without activation checkpointing; rank zero writes the whole
model state and the step losses to `--out`.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import surge
from surge.speed.activation_checkpointing import is_checkpointed


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.lin = nn.Linear(width, width)
        self.drop = nn.Dropout(0.25)

    def forward(self, x):
        return x + self.drop(torch.tanh(self.lin(x)))


class Net(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inp = nn.Linear(6, 16)
        self.blocks = nn.Sequential(Block(16), Block(16), Block(16))
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.blocks(self.inp(x)))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def on_train_batch_start(self, batch, batch_idx):
        self.wrapped = sum(is_checkpointed(m) for m in self.modules())  # during the fit (gone after)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.01)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--strategy", required=True)
    p.add_argument("--ac", action="store_true")
    p.add_argument("--root", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    strategy = args.strategy
    if strategy == "fsdp":
        strategy = surge.strategies.FSDPStrategy(shard={Block})
    surge.seed_everything(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(48, 6, generator=g)
    train = DataLoader(TensorDataset(x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long()), batch_size=4)
    trainer = surge.Trainer(
        accelerator="cpu", devices=2, strategy=strategy, max_steps=3, accumulate_grad_batches=2,
        default_root_dir=args.root, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, logger=False, activation_checkpointing=[Block] if args.ac else None,
    )  # fmt: skip
    model = Net()
    trainer.fit(model, train)
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    weights = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if trainer.is_global_zero:
        assert not any(is_checkpointed(m) for m in model.modules())  # the hooks went with the fit
        torch.save(
            {"state_dict": weights, "global_step": trainer.global_step, "wrapped": model.wrapped}, args.out
        )


if __name__ == "__main__":
    main()
