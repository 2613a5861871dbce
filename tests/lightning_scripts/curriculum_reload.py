"""A curriculum: the datamodule's training set grows each epoch (it reads `trainer.current_epoch`),
and `reload_dataloaders_every_n_epochs` asks it for new loaders; unmodified."""

import json

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def samples(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    return TensorDataset(x, (x.sum(1) > 0).long())


class Curriculum(L.LightningDataModule):
    def __init__(self):
        super().__init__()
        self.train_requests, self.val_requests = [], []

    def train_dataloader(self):
        epoch = self.trainer.current_epoch
        self.train_requests.append(epoch)
        return DataLoader(samples(20 + 10 * epoch, epoch), batch_size=10, shuffle=True)

    def val_dataloader(self):
        self.val_requests.append(self.trainer.current_epoch)
        return DataLoader(samples(10, 99), batch_size=10)


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(3, 2)
        self.batches_per_epoch, self.seen = [], {}

    def on_train_epoch_start(self):
        self.batches_per_epoch.append(self.trainer.num_training_batches)

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen[self.current_epoch] = self.seen.get(self.current_epoch, 0) + len(x)
        return F.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main():
    L.seed_everything(0)
    dm, model = Curriculum(), Classifier()
    trainer = L.Trainer(
        max_epochs=4,
        reload_dataloaders_every_n_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
    )
    trainer.fit(model, datamodule=dm)
    print(
        json.dumps(
            {
                "train_requests": dm.train_requests,
                "val_requests": dm.val_requests,
                "batches_per_epoch": model.batches_per_epoch,
                "seen": [model.seen[e] for e in sorted(model.seen)],
                "global_step": trainer.global_step,
            }
        )
    )


if __name__ == "__main__":
    main()
