"""A LightningCLI script with subcommands (`python classifier_cli.py fit --trainer.max_epochs=2`),
a DataModule whose class count is linked into the model, and a CLI subclass with Lightning's
hooks, unmodified."""

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.cli import LightningCLI
from torch.utils.data import DataLoader, TensorDataset


class Classifier(LightningModule):
    def __init__(self, num_classes: int = 2, hidden: int = 16, lr: float = 0.1):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, num_classes)
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_acc", (self.net(x).argmax(1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class Blobs(LightningDataModule):
    def __init__(self, num_classes: int = 3, batch_size: int = 10):
        super().__init__()
        self.num_classes, self.batch_size = num_classes, batch_size

    def setup(self, stage):
        g = torch.Generator().manual_seed(0)
        y = torch.arange(60) % self.num_classes
        x = torch.randn(60, 4, generator=g) * 0.1 + F.one_hot(y, 4).float()
        self.train_set, self.val_set = TensorDataset(x[:50], y[:50]), TensorDataset(x[50:], y[50:])

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.batch_size)


class MyCLI(LightningCLI):
    def add_arguments_to_parser(self, parser):
        parser.link_arguments("data.num_classes", "model.num_classes")

    def before_fit(self):
        print(f"BEFORE_FIT num_classes={self.model.hparams.num_classes}")

    def after_fit(self):
        print(
            f"RESULT global_step={self.trainer.global_step} epochs={self.trainer.current_epoch} "
            f"val_acc={float(self.trainer.callback_metrics['val_acc']):.2f}"
        )


if __name__ == "__main__":
    MyCLI(Classifier, Blobs, trainer_defaults={"enable_progress_bar": False, "max_epochs": 5})
