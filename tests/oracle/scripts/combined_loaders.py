"""Several loaders per step: a `CombinedLoader` in each mode for training (`sequential` is refused
for training), `sequential` and `max_size` for validation, a dict of loaders from
`train_dataloader()` (combined `max_size_cycle`), per-loader batch limits; what each step saw
(the sample ids per loader), its `batch_idx` and `dataloader_idx`, the batch counts, the logged
metrics and the weights.

`--ddp` runs two of the fits on two CPU processes (gloo); each rank records its own steps."""

import sys

import lightning as L
import record
import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import CombinedLoader
from lightning.pytorch.utilities.combined_loader import CombinedLoader as FromModule
from torch.utils.data import DataLoader, TensorDataset

DDP = "--ddp" in sys.argv
record.PER_RANK = DDP


def data(n, first_id):
    g = torch.Generator().manual_seed(first_id)
    return TensorDataset(torch.randn(n, 2, generator=g), torch.arange(first_id, first_id + n))


def loader(n, first_id, shuffle=False):
    return DataLoader(data(n, first_id), batch_size=4, shuffle=shuffle)


def ids(batch):
    """A step's batch as the sample ids per loader (None where a loader gave none)."""
    if batch is None:
        return None
    if isinstance(batch, dict):
        return {k: ids(v) for k, v in batch.items()}
    if isinstance(batch, list) and not isinstance(batch[0], torch.Tensor):
        return [ids(v) for v in batch]
    return batch[1].tolist()


def pairs(batch):
    if isinstance(batch, dict):
        return [p for v in batch.values() for p in pairs(v)]
    if isinstance(batch, list) and batch and not isinstance(batch[0], torch.Tensor):
        return [p for v in batch for p in pairs(v)]
    return [] if batch is None else [batch]


class Net(L.LightningModule):
    def __init__(self, name, train, val):
        super().__init__()
        self.name, self.train_data, self.val_data = name, train, val
        self.net = torch.nn.Linear(2, 1)

    def train_dataloader(self):
        return self.train_data()

    def val_dataloader(self):
        return self.val_data()

    def loss(self, batch):
        return sum(F.mse_loss(self.net(x).squeeze(-1), i.float() / 40) for x, i in pairs(batch))

    def training_step(self, batch, batch_idx):
        record.append(f"{self.name}/train", [self.current_epoch, batch_idx, ids(batch)])
        loss = self.loss(batch)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        key = "sanity" if self.trainer.sanity_checking else "val"
        record.append(f"{self.name}/{key}", [batch_idx, dataloader_idx, ids(batch)])
        self.log("val_loss", self.loss(batch), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def trainer(**kwargs):
    return L.Trainer(
        max_epochs=2,
        accelerator="cpu",
        devices=2 if DDP else 1,
        strategy="ddp" if DDP else "auto",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )


def fit(name, train, val, **kwargs):
    L.seed_everything(3)
    model = Net(name, train, val)
    t = trainer(**kwargs)
    t.fit(model)
    record.put(f"{name}/num_training_batches", t.num_training_batches)
    record.put(f"{name}/num_val_batches", t.num_val_batches)
    record.put(f"{name}/train_dataloader", shape(t.train_dataloader))
    record.put(f"{name}/val_dataloaders", shape(t.val_dataloaders))
    record.put(f"{name}/metrics", record.metrics(t))
    record.weights(name, model)


def shape(loaders):
    if isinstance(loaders, dict):
        return {k: shape(v) for k, v in loaders.items()}
    if isinstance(loaders, (list, tuple)):
        return [shape(v) for v in loaders]
    return [type(loaders).__name__, len(loaders)]


def two_train(mode):
    return lambda: CombinedLoader({"a": loader(12, 0, True), "b": loader(20, 100, True)}, mode)


def seq_val():
    return FromModule([loader(8, 200), loader(12, 300)], "sequential")


def max_val():
    return CombinedLoader({"x": loader(8, 200), "y": loader(12, 300)}, "max_size")


def main():
    fit("max_size", two_train("max_size"), seq_val)
    fit("dict", lambda: {"a": loader(12, 0, True), "b": loader(20, 100, True)}, max_val)
    if not DDP:  # (two fits show the per-rank shares; each fit under Lightning's DDP costs seconds)
        fit("min_size", two_train("min_size"), seq_val)
        fit("max_size_cycle", two_train("max_size_cycle"), max_val)
        fit("limits", two_train("max_size"), seq_val, limit_train_batches=0.5, limit_val_batches=1)
        try:
            fit("sequential", two_train("sequential"), seq_val)
        except ValueError as err:
            record.put(
                "sequential/error", 'does not support the `CombinedLoader(mode="sequential")`' in str(err)
            )


if __name__ == "__main__":
    main()
