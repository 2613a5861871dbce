"""A small transformer block trained with Lightning's `ModelParallelStrategy(data_parallel_size=2,
tensor_parallel_size=2)` on 4 CPU processes (gloo): `configure_model` applies a tensor-parallel plan
(attention and MLP, colwise then rowwise) over `self.device_mesh["tensor_parallel"]` and
`fully_shard` over `self.device_mesh["data_parallel"]`, as Lightning's examples do. AdamW,
accumulation over 2 batches, a shuffled loader; the loss and a count of samples seen (a sum) logged
with `sync_dist=True`. Records the strategy's mesh and sampler coordinates
on every rank, the metrics, and the whole (gathered) weights."""

import lightning as L
import record
import torch
import torch.nn.functional as F
from lightning.pytorch.strategies import ModelParallelStrategy
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

WIDTH, HEADS = 16, 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.q, self.k, self.v = (
            nn.Linear(WIDTH, WIDTH),
            nn.Linear(WIDTH, WIDTH, bias=False),
            nn.Linear(WIDTH, WIDTH),
        )
        self.out = nn.Linear(WIDTH, WIDTH)
        self.fc1, self.fc2 = nn.Linear(WIDTH, 2 * WIDTH), nn.Linear(2 * WIDTH, WIDTH)

    def attention(self, x):
        b, t, _ = x.shape
        q, k, v = self.q(x), self.k(x), self.v(x)
        heads = q.shape[-1] // (WIDTH // HEADS)  # this rank's heads
        q, k, v = (z.view(b, t, heads, -1).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, t, -1))

    def forward(self, x):
        x = x + self.attention(self.norm1(x))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp, self.block, self.head = nn.Linear(6, WIDTH), Block(), nn.Linear(WIDTH, 3)

    def forward(self, x):
        return self.head(self.block(self.inp(x)).mean(dim=1))


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = Net()

    def configure_model(self):
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        tp, dp = self.device_mesh["tensor_parallel"], self.device_mesh["data_parallel"]
        col, row = ColwiseParallel(), RowwiseParallel()
        plan = {"q": col, "k": col, "v": col, "out": row, "fc1": col, "fc2": row}
        parallelize_module(self.model.block, tp, plan)
        fully_shard(self.model.block, mesh=dp)
        fully_shard(self.model, mesh=dp)

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        self.log("seen", float(len(y)), reduce_fx="sum", on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y), sync_dist=True)

    def on_train_start(self):
        strategy, mesh = self.trainer.strategy, self.device_mesh
        mine = {
            "mesh": [mesh.mesh_dim_names, list(mesh.shape)], "sampler": strategy.distributed_sampler_kwargs,
            "rank": strategy.global_rank, "world_size": strategy.world_size,
            "model": type(strategy.model).__name__, "root_device": str(strategy.root_device),
        }  # fmt: skip
        everyone = [None] * strategy.world_size
        torch.distributed.all_gather_object(everyone, record.plain(mine))
        record.put("ranks", everyone)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.01)


def data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 4, 6, generator=g)
    y = (x[:, :, 0].sum(1) > 0).long() + (x[:, :, 1].sum(1) > 0).long()
    return TensorDataset(x, y)


def main():
    L.seed_everything(0)
    model = Model()
    trainer = L.Trainer(
        strategy=ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=2), accelerator="cpu",
        devices=4, max_epochs=2, accumulate_grad_batches=2, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
    )  # fmt: skip
    dataset = data()
    trainer.fit(model, DataLoader(dataset, batch_size=4, shuffle=True), DataLoader(dataset, batch_size=8))
    record.put("metrics", record.metrics(trainer))
    record.put("global_step", trainer.global_step)
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    whole = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if trainer.global_rank == 0:
        (record.DIR / "weights").mkdir(parents=True, exist_ok=True)
        torch.save(whole, record.DIR / "weights" / "model_parallel.pt")


if __name__ == "__main__":
    main()
