"""A plain PyTorch Lightning script: `python examples/lightning_regressor.py` with Lightning
installed, or `surge run examples/lightning_regressor.py` with surge alone (no edits)."""

import argparse

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self, lr: float = 0.01):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def loaders() -> tuple[DataLoader, DataLoader]:
    x = torch.randn(512, 8, generator=torch.Generator().manual_seed(0))
    y = x.sum(dim=1, keepdim=True)
    train, val = TensorDataset(x[:448], y[:448]), TensorDataset(x[448:], y[448:])
    return DataLoader(train, batch_size=32, shuffle=True), DataLoader(val, batch_size=64)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--max_epochs", type=int, default=5)
    args = parser.parse_args()
    L.seed_everything(0)
    trainer = L.Trainer(max_epochs=args.max_epochs, enable_progress_bar=False)
    trainer.fit(Regressor(), *loaders())
    print(f"val_loss {trainer.callback_metrics['val_loss']:.4f}")
