"""DataLoader workers started by "spawn" and by "forkserver" (the default start method on macOS
and Windows), two for the training loader, persistent, with random augmentation in `__getitem__` (seeded per
worker from the loader's base seed): one fit of three epochs per start method, in one process.
The main guard is what spawned workers need: they import this script again."""

import sys

import lightning as L
import record
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Noisy(Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 4, generator=g)
        self.y = self.x @ torch.tensor([1.0, -2.0, 0.5, 0.0])

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i] + 0.05 * torch.randn(4), self.y[i]


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self.net(x).squeeze(-1), y)
        self.log("train_loss", loss, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.mse_loss(self.net(x).squeeze(-1), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def train_loader(context):
    return DataLoader(
        Noisy(48, 0),
        batch_size=8,
        shuffle=True,
        num_workers=2,
        multiprocessing_context=context,
        persistent_workers=True,
    )


def fit(context):
    L.seed_everything(5)
    model = Regressor()
    trainer = L.Trainer(
        max_epochs=3,
        logger=CSVLogger(save_dir=".", name=context),
        log_every_n_steps=2,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(model, train_loader(context), DataLoader(Noisy(16, 1), batch_size=8))
    record.put(f"{context}/after_fit", record.metrics(trainer))
    record.weights(context, model)


if __name__ == "__main__":
    for context in sys.argv[1:] or ["spawn", "forkserver"]:
        fit(context)
