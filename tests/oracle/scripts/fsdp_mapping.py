"""Lightning's `FSDPStrategy(...)` against surge's own `strategy` object it maps to, on two CPU
processes (gloo), run under `surge run` only: Lightning's FSDP (FSDP1) refuses the CPU, so the
oracle here is surge's native FSDP2 run with the arguments the mapping promises. Both fits record
the full weights (gathered from the shards on every rank, saved by rank zero)."""

import os

import lightning as L
import record
import torch
import torch.nn.functional as F
from lightning.pytorch.strategies import FSDPStrategy
from torch import nn
from torch.distributed.fsdp import CPUOffload
from torch.utils.data import DataLoader, TensorDataset

import surge.strategies


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(8, 8)

    def forward(self, x):
        return x + torch.tanh(self.inner(x))


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(4, 8)
        self.blocks = nn.Sequential(Block(), Block())
        self.head = nn.Linear(8, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.head(self.blocks(self.stem(x))), y)
        self.log("train_loss", loss, on_epoch=True, sync_dist=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.01)


def data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    return DataLoader(TensorDataset(x, (x[:, 0] > x[:, 1]).long()), batch_size=8, shuffle=True)


def fit(name, strategy, **trainer_args):
    L.seed_everything(5)
    model = Model()
    trainer = L.Trainer(
        strategy=strategy, accelerator="cpu", devices=2, max_epochs=2, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, **trainer_args,
    )  # fmt: skip
    trainer.fit(model, data())
    full = {
        k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().cpu()
        for k, v in model.state_dict().items()
    }
    if trainer.global_rank == 0:
        os.makedirs(record.DIR / "weights", exist_ok=True)
        torch.save(full, record.DIR / "weights" / f"{name}.pt")
    record.put(f"{name}/metrics", record.metrics(trainer))
    record.put(f"{name}/same_object", trainer.strategy is strategy)
    record.put(
        f"{name}/mapped",
        {
            "shard": sorted(c.__name__ for c in strategy.shard_classes),
            "reshard_after_forward": strategy.reshard_after_forward, "cpu_offload": strategy.offload_params,
            "checkpointing": [c.__name__ for c in strategy.activation_checkpointing_policy or ()],
        },
    )  # fmt: skip


if __name__ == "__main__":
    lightning = FSDPStrategy(
        auto_wrap_policy={Block}, sharding_strategy="SHARD_GRAD_OP", activation_checkpointing_policy={Block},
        cpu_offload=CPUOffload(offload_params=False), use_orig_params=True,
    )  # fmt: skip
    fit("lightning_fsdp", lightning)
    native = surge.strategies.FSDPStrategy(shard=[Block], reshard_after_forward=False)
    fit("native_fsdp", native, activation_checkpointing=[Block])
