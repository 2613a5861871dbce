"""A tensor-parallel x FSDP2 job for the distributed tests: `python mesh_script.py --mesh 2,2 ...`
(4 processes on a 2 x 2 mesh) or `--mesh 1` (one plain process, the reference).

A small transformer block (attention with 2 heads, an MLP) whose tensor-parallel plan is applied in
`configure_model` when the strategy hands the module a mesh. Rank zero writes the whole (gathered)
weights and optimizer state, the epoch metrics and what each rank's sampler gave it to `--out`.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import surge
from surge.speed.activation_checkpointing import is_checkpointed

WIDTH, HEADS = 16, 2


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        # no key bias: softmax ignores it, so its gradient is rounding noise, which AdamW's step
        # normalisation would turn into full-size updates that differ between layouts
        self.q, self.k, self.v = (
            nn.Linear(WIDTH, WIDTH),
            nn.Linear(WIDTH, WIDTH, bias=False),
            nn.Linear(WIDTH, WIDTH),
        )
        self.out = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.q(x), self.k(x), self.v(x)  # under tensor parallel: this rank's heads only
        heads = q.shape[-1] // (WIDTH // HEADS)
        q, k, v = (z.view(b, t, heads, -1).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, t, -1))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(WIDTH), Attention()
        self.norm2, self.fc1, self.fc2 = (
            nn.LayerNorm(WIDTH),
            nn.Linear(WIDTH, 2 * WIDTH),
            nn.Linear(2 * WIDTH, WIDTH),
        )

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


def plan() -> dict:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    col, row = ColwiseParallel(), RowwiseParallel()
    return {"attn.q": col, "attn.k": col, "attn.v": col, "attn.out": row, "fc1": col, "fc2": row}


class Net(surge.Module):
    def __init__(self, user_shard: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inp = nn.Linear(6, WIDTH)
        self.blocks = nn.Sequential(Block(), Block())
        self.head = nn.Linear(WIDTH, 3)
        self.user_shard = user_shard

    def configure_model(self):
        mesh = self.device_mesh
        if mesh is None:
            return
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor.parallel import parallelize_module

        for block in self.blocks:
            parallelize_module(block, mesh["tensor_parallel"], plan())
            if self.user_shard:
                fully_shard(block, mesh=mesh["data_parallel"])

    def forward(self, x):
        return self.head(self.blocks(self.inp(x)).mean(dim=1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        self.log("seen", float(len(y)), reduce_fx="sum", on_step=False, on_epoch=True)
        self.log("label_sum", y.sum().float(), reduce_fx="sum", on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y))
        self.log("val_seen", float(len(y)), reduce_fx="sum")

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.01)


class SeenBatches(surge.callbacks.Callback):
    """The first sample's features of every training batch this rank read (which rows it got)."""

    def __init__(self) -> None:
        self.rows: list[list[float]] = []

    def on_train_start(self, trainer, module):
        self.checkpointed = sum(is_checkpointed(m) for m in module.modules())  # (hooks gone after fit)

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.rows.append(batch[0][:, 0, 0].tolist())


def data(n: int) -> TensorDataset:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 4, 6, generator=g)
    return TensorDataset(x, (x[:, :, 0].sum(1) > 0).long() + (x[:, :, 1].sum(1) > 0).long())


def compile_arg(value: str | None) -> object:
    """`--compile regions` -> "regions"; `--compile regions:aot_eager` -> that scope with that backend."""
    if value is None:
        return False
    scope, _, backend = value.partition(":")
    return {"scope": scope, "backend": backend} if backend else scope


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mesh", default="1")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--samples", type=int, default=80)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--accumulate", type=int, default=2)
    p.add_argument("--clip", type=float, default=None)
    p.add_argument("--precision", default="32-true")
    p.add_argument("--user-shard", action="store_true")
    p.add_argument("--compile", default=None, help="SCOPE or SCOPE:BACKEND")
    p.add_argument("--checkpointing", action="store_true", help="activation_checkpointing={Block}")
    p.add_argument("--doctor", action="store_true", help="profiler: the doctor, its report kept")
    p.add_argument("--root", required=True)
    p.add_argument("--ckpt", default=None)
    p.add_argument("--out", required=True)
    args = p.parse_args()

    sizes = [int(s) for s in args.mesh.split(",")]
    strategy, devices = "auto", 1
    if len(sizes) == 2:
        strategy = surge.strategies.ModelParallel(
            data_parallel=sizes[0], tensor_parallel=sizes[1], shard={Block}
        )
        devices = sizes[0] * sizes[1]
    surge.seed_everything(0)
    dataset = data(args.samples)
    seen = SeenBatches()
    trainer = surge.Trainer(
        accelerator="cpu", devices=devices, strategy=strategy, max_epochs=args.epochs,
        accumulate_grad_batches=args.accumulate, gradient_clip_val=args.clip, precision=args.precision,
        default_root_dir=args.root, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0, log_every_n_steps=1, callbacks=[seen], compile=compile_arg(args.compile),
        activation_checkpointing=[Block] if args.checkpointing else None,
        profiler=surge.profiler.SimpleProfiler(measure_workers=False) if args.doctor else None,
    )  # fmt: skip
    model = Net(args.user_shard)
    train = DataLoader(dataset, batch_size=args.batch_size)
    trainer.fit(model, train, DataLoader(dataset, batch_size=10), ckpt_path=args.ckpt)
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    weights, optim = get_state_dict(model, trainer.optimizers[0], options=options)
    rows = trainer.strategy.all_gather_object(seen.rows) if devices > 1 else [seen.rows]
    if trainer.is_global_zero:
        torch.save(
            {
                "state_dict": weights,
                "optimizer": optim,
                "metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
                "rows": rows,
                "global_step": trainer.global_step,
                "world_size": trainer.world_size,
                "checkpointed": seen.checkpointed,
                "compiled_graphs": torch._dynamo.utils.counters["stats"]["unique_graphs"],
                "doctor": {
                    k: v for k, v in (trainer.profiler.report or {}).items() if k in ("findings", "mesh")
                }
                if args.doctor
                else None,
                "last_ckpt": trainer.checkpoint_callback.last_model_path
                or trainer.checkpoint_callback.best_model_path,
            },
            args.out,
        )


if __name__ == "__main__":
    main()
