"""An FSDP job for the distributed tests: `python fsdp_script.py --devices N --strategy fsdp ...`.

Rank zero writes the whole (gathered) model and optimizer state and the run's facts to `--out`.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import surge


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.lin = nn.Linear(width, width)

    def forward(self, x):
        return x + torch.tanh(self.lin(x))


class Net(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inp = nn.Linear(6, 16)
        self.blocks = nn.Sequential(Block(16), Block(16))
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.blocks(self.inp(x)))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.01)


class StepLosses(surge.callbacks.Callback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.losses.append(float(outputs["loss"]))


def data(n: int) -> TensorDataset:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 6, generator=g)
    return TensorDataset(x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long())


def whole_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_state_dict(model, optimizer, options=options)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--strategy", default="auto")
    p.add_argument("--shard", default="block", choices=["block", "none", "size"])
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--samples", type=int, default=64)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=-1)
    p.add_argument("--accumulate", type=int, default=1)
    p.add_argument("--clip", type=float, default=None)
    p.add_argument("--precision", default="32-true")
    p.add_argument("--shuffle", action="store_true")
    p.add_argument("--root", required=True)
    p.add_argument("--ckpt", default=None)
    p.add_argument("--out", required=True)
    p.add_argument("--async-checkpoint", action="store_true")
    p.add_argument("--every-step", action="store_true", help="a checkpoint every step, top 2 and last")
    args = p.parse_args()

    strategy = args.strategy
    if strategy == "fsdp":
        shard = {"block": {Block}, "none": None, "size": 200}[args.shard]
        strategy = surge.strategies.FSDPStrategy(shard=shard)
    surge.seed_everything(0)
    dataset = data(args.samples)
    train = DataLoader(dataset, batch_size=args.batch_size, shuffle=args.shuffle)
    losses = StepLosses()
    every_step = surge.callbacks.ModelCheckpoint(every_n_train_steps=1, save_top_k=2, save_last=True)
    more = [every_step] if args.every_step else []
    trainer = surge.Trainer(
        accelerator="cpu", devices=args.devices, strategy=strategy, max_epochs=args.epochs,
        max_steps=args.max_steps, accumulate_grad_batches=args.accumulate, gradient_clip_val=args.clip,
        precision=args.precision, default_root_dir=args.root, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0, log_every_n_steps=1, callbacks=[losses, *more],
        async_checkpoint=args.async_checkpoint,
    )  # fmt: skip
    model = Net()
    trainer.fit(model, train, DataLoader(dataset, batch_size=5), ckpt_path=args.ckpt)
    weights, optim = whole_state(model, trainer.optimizers[0])
    if trainer.is_global_zero:
        torch.save(
            {
                "state_dict": weights,
                "optimizer": optim,
                "losses": losses.losses,
                "metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
                "global_step": trainer.global_step,
                "world_size": trainer.world_size,
                "strategy": trainer.strategy.name,
                "last_ckpt": trainer.checkpoint_callback.last_model_path
                or trainer.checkpoint_callback.best_model_path,
            },
            args.out,
        )


if __name__ == "__main__":
    main()
