"""Lightning's autoencoder example (LightningCLI with run=False, a DataModule, an image-sampling
callback writing to TensorBoard), unmodified but for its data: MNIST is replaced by generated
8x8 "images" so it runs offline."""

from os import path

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningDataModule, LightningModule, Trainer, callbacks, cli_lightning_logo
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.imports import _TORCHVISION_AVAILABLE
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split

DATASETS_PATH = path.join(path.dirname(__file__), "Datasets")

if _TORCHVISION_AVAILABLE:
    import torchvision


class ImageSampler(callbacks.Callback):
    def __init__(self, num_samples: int = 3, nrow: int = 8):
        super().__init__()
        self.num_samples = num_samples
        self.nrow = nrow

    @rank_zero_only
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not _TORCHVISION_AVAILABLE:
            images = pl_module(torch.randn(self.num_samples, 64, device=pl_module.device))
            trainer.logger.experiment.add_image(
                "images", images.view(1, -1, 8), global_step=trainer.global_step
            )
            return
        images = pl_module(torch.randn(self.num_samples, 64, device=pl_module.device))
        grid = torchvision.utils.make_grid(images.view(-1, 1, 8, 8), nrow=self.nrow)
        trainer.logger.experiment.add_image("images", grid, global_step=trainer.global_step)


class LitAutoEncoder(LightningModule):
    def __init__(self, hidden_dim: int = 16):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(64, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 3))
        self.decoder = nn.Sequential(nn.Linear(3, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 64))

    def forward(self, x):
        return self.decoder(self.encoder(x))

    def training_step(self, batch, batch_idx):
        return self._common_step(batch, batch_idx, "train")

    def validation_step(self, batch, batch_idx):
        self._common_step(batch, batch_idx, "val")

    def test_step(self, batch, batch_idx):
        self._common_step(batch, batch_idx, "test")

    def predict_step(self, batch, batch_idx, dataloader_idx=None):
        x = self._prepare_batch(batch)
        return self(x)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)

    def _prepare_batch(self, batch):
        x, _ = batch
        return x.view(x.size(0), -1)

    def _common_step(self, batch, batch_idx, stage: str):
        x = self._prepare_batch(batch)
        loss = F.mse_loss(x, self(x))
        self.log(f"{stage}_loss", loss, on_step=True)
        return loss


class MyDataModule(LightningDataModule):
    def __init__(self, batch_size: int = 32):
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        images = torch.rand(320, 64, generator=generator)
        dataset = TensorDataset(images, torch.zeros(320))
        self.mnist_test = TensorDataset(images[:64], torch.zeros(64))
        self.mnist_train, self.mnist_val = random_split(dataset, [256, 64], generator=generator)
        self.batch_size = batch_size

    def train_dataloader(self):
        return DataLoader(self.mnist_train, batch_size=self.batch_size)

    def val_dataloader(self):
        return DataLoader(self.mnist_val, batch_size=self.batch_size)

    def test_dataloader(self):
        return DataLoader(self.mnist_test, batch_size=self.batch_size)

    def predict_dataloader(self):
        return DataLoader(self.mnist_test, batch_size=self.batch_size)


def cli_main():
    cli = LightningCLI(
        LitAutoEncoder,
        MyDataModule,
        seed_everything_default=1234,
        run=False,  # used to de-activate automatic fitting.
        trainer_defaults={"callbacks": ImageSampler(), "max_epochs": 10},
        save_config_kwargs={"overwrite": True},
    )
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    cli.trainer.test(ckpt_path="best", datamodule=cli.datamodule)
    predictions = cli.trainer.predict(ckpt_path="best", datamodule=cli.datamodule)
    print(
        f"RESULT global_step={cli.trainer.global_step} epochs={cli.trainer.current_epoch} "
        f"predictions={len(predictions)}x{tuple(predictions[0].shape)}"
    )


if __name__ == "__main__":
    cli_lightning_logo()
    cli_main()
