"""A classifier validated on several loaders at once (a clean and a noisy split, as papers report
in-distribution and shifted accuracy): `validation_step(batch, batch_idx, dataloader_idx=0)`,
names suffixed by Lightning, one metric logged under its own name per loader
(`add_dataloader_idx=False`); the train loader shuffles, three epochs.

`--ddp` runs the same on two CPU processes (gloo)."""

import sys

import lightning as L
import record
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def blobs(n, seed, noise=0.0):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(3, (n,), generator=g)
    centers = torch.tensor([[2.0, 0.0], [-1.0, 1.5], [-1.0, -1.5]])
    x = centers[y] + (0.7 + noise) * torch.randn(n, 2, generator=g)
    return TensorDataset(x, y)


class Classifier(L.LightningModule):
    def __init__(self, hidden=16, lr=0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(2, hidden), nn.Tanh(), nn.Dropout(0.2), nn.Linear(hidden, 3))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        x, y = batch
        logits = self.net(x)
        self.log("val_loss", F.cross_entropy(logits, y), sync_dist=True)
        acc = (logits.argmax(-1) == y).float().mean()
        name = ("val_acc_clean", "val_acc_noisy")[dataloader_idx]
        self.log(name, acc, add_dataloader_idx=False, sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


def main(ddp):
    L.seed_everything(7)
    train = DataLoader(blobs(160, 0), batch_size=16, shuffle=True)
    vals = [DataLoader(blobs(48, 1), batch_size=16), DataLoader(blobs(48, 2, noise=0.8), batch_size=24)]
    model = Classifier()
    trainer = L.Trainer(
        max_epochs=3,
        devices=2 if ddp else 1,
        accelerator="cpu",
        strategy="ddp" if ddp else "auto",
        callbacks=[
            ModelCheckpoint(
                dirpath="ckpts", monitor="val_acc_noisy", mode="max", filename="{epoch}-{val_acc_noisy:.3f}"
            )
        ],
        logger=CSVLogger(save_dir=".", name="logs"),
        log_every_n_steps=3,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, train, vals)
    record.put("after_fit", record.metrics(trainer))
    record.weights("final", model)
    record.put("validate", trainer.validate(model, vals, verbose=False))
    record.put("after_validate", record.metrics(trainer))


if __name__ == "__main__":
    main(ddp="--ddp" in sys.argv)
