"""A bug report in the shape of Lightning's template (the "boring model"), unmodified."""

import os

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.demos.boring_classes import BoringDataModule
from lightning.pytorch.demos.boring_classes import BoringModel as DemoBoringModel
from torch.utils.data import DataLoader, Dataset


class RandomDataset(Dataset):
    def __init__(self, size, length):
        self.len = length
        self.data = torch.randn(length, size)

    def __getitem__(self, index):
        return self.data[index]

    def __len__(self):
        return self.len


class BoringModel(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(32, 2)

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        loss = self(batch).sum()
        self.log("train_loss", loss)
        return {"loss": loss}

    def validation_step(self, batch, batch_idx):
        loss = self(batch).sum()
        self.log("valid_loss", loss)

    def test_step(self, batch, batch_idx):
        loss = self(batch).sum()
        self.log("test_loss", loss)

    def configure_optimizers(self):
        return torch.optim.SGD(self.layer.parameters(), lr=0.1)


def run():
    train_data = DataLoader(RandomDataset(32, 64), batch_size=2)
    val_data = DataLoader(RandomDataset(32, 64), batch_size=2)
    test_data = DataLoader(RandomDataset(32, 64), batch_size=2)

    model = BoringModel()
    trainer = Trainer(
        default_root_dir=os.getcwd(),
        limit_train_batches=1,
        limit_val_batches=1,
        limit_test_batches=1,
        num_sanity_val_steps=0,
        max_epochs=1,
        enable_model_summary=False,
    )
    trainer.fit(model, train_dataloaders=train_data, val_dataloaders=val_data)
    results = trainer.test(model, dataloaders=test_data)
    print(
        f"RESULT custom global_step={trainer.global_step} epochs={trainer.current_epoch} test_keys={sorted(results[0])}"
    )

    demo = DemoBoringModel()
    trainer = Trainer(max_epochs=2, enable_progress_bar=False, logger=False, enable_checkpointing=False)
    trainer.fit(demo, datamodule=BoringDataModule())
    print(
        f"RESULT demo global_step={trainer.global_step} lr={trainer.optimizers[0].param_groups[0]['lr']:.6g}"
    )


if __name__ == "__main__":
    run()
