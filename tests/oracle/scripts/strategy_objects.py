"""Strategy objects from `lightning.pytorch.strategies` and what `trainer.strategy` answers.

`ddp2`: `Trainer(strategy=DDPStrategy(find_unused_parameters=True), accelerator="cpu", devices=2)`
(gloo) trains a model with a parameter the loss never uses; in `on_train_start` each rank records
the strategy's ranks, devices and wrapped model, and `reduce`/`broadcast`/`all_gather`/
`reduce_boolean_decision` results (gathered to rank zero). `one`: the same on one process with
`SingleDeviceStrategy()` and then `DDPStrategy(...)` with `devices=1`."""

import sys

import lightning as L
import record
import torch
import torch.nn.functional as F
from lightning.pytorch.strategies import DDPStrategy, ParallelStrategy, SingleDeviceStrategy, Strategy
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
        self.unused = nn.Linear(3, 3)  # DDP must be told: find_unused_parameters=True

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, on_epoch=True, sync_dist=True)
        return loss

    def on_train_start(self):
        record.put(f"{SCENARIO}/members", members(self.trainer.strategy, self))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def members(strategy, module):
    """What the strategy answers on every rank, gathered (each rank's own, by rank)."""
    rank = strategy.global_rank
    x = torch.tensor([rank + 1.0, 2.0 * rank])
    mean = strategy.reduce(x)
    ints = strategy.reduce(torch.tensor(rank + 2))  # an integer mean: truncated in place
    mine = {
        "root_device": str(strategy.root_device), "world_size": strategy.world_size, "global_rank": rank,
        "local_rank": strategy.local_rank, "is_global_zero": strategy.is_global_zero,
        "mean": mean, "reduced_in_place": mean is x, "int_mean": ints,
        "sum": strategy.reduce(torch.tensor(float(rank + 1)), reduce_op="sum"),
        "max": strategy.reduce(torch.tensor(float(rank)), reduce_op="max"),
        "not_a_tensor": strategy.reduce(3.5),
        "broadcast": strategy.broadcast({"from": rank, "items": [rank, "x"]}, src=strategy.world_size - 1),
        "gathered": strategy.all_gather(torch.tensor([rank, 10 * rank])),
        "all_true": strategy.reduce_boolean_decision(rank == 0),
        "any_true": strategy.reduce_boolean_decision(rank == 0, all=False),
        "model": type(strategy.model).__name__, "lightning_module_is_module": strategy.lightning_module is module,
        "parallel": isinstance(strategy, ParallelStrategy), "strategy": isinstance(strategy, Strategy),
    }  # fmt: skip
    if isinstance(strategy, ParallelStrategy):
        mine["parallel_devices"] = [str(d) for d in strategy.parallel_devices]
        mine["num_processes"] = strategy.num_processes
        mine["node_rank"], mine["num_nodes"] = strategy.node_rank, strategy.num_nodes
        mine["sampler_kwargs"] = strategy.distributed_sampler_kwargs
    strategy.barrier("members")
    everyone = [None] * strategy.world_size
    if strategy.world_size > 1:
        torch.distributed.all_gather_object(everyone, record.plain(mine))
    else:
        everyone = [record.plain(mine)]
    return everyone


def data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    y = (x[:, 0] + x[:, 1] > 0).long()
    return DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)  # a sequential one differs (docs)


def fit(strategy, devices):
    L.seed_everything(3)
    model = Model()
    trainer = L.Trainer(
        strategy=strategy, accelerator="cpu", devices=devices, max_epochs=2, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(model, data())
    record.put(f"{SCENARIO}/same_object", trainer.strategy is strategy)
    record.put(f"{SCENARIO}/metrics", record.metrics(trainer))
    record.weights(SCENARIO, model)


if __name__ == "__main__":
    if sys.argv[1] == "ddp2":
        SCENARIO = "ddp2"
        fit(DDPStrategy(find_unused_parameters=True), 2)
    else:
        SCENARIO = "single"
        fit(SingleDeviceStrategy(), 1)
        SCENARIO = "ddp1"
        fit(DDPStrategy(find_unused_parameters=True, gradient_as_bucket_view=True), 1)
