"""A LightningModule and LightningDataModule, written the way Lightning users write them, run under
surge after changing only the imports and the two base-class names."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split

import surge as L  # was: import lightning as L
from surge.callbacks import EarlyStopping, ModelCheckpoint  # was: from lightning.pytorch.callbacks import ...


class LitDigits(L.Module):  # was: L.LightningModule
    def __init__(self, hidden: int = 128, lr: float = 3e-3):
        super().__init__()
        self.save_hyperparameters()
        self.model = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * 16, self.hparams.hidden), nn.ReLU(), nn.Linear(self.hparams.hidden, 10),
        )  # fmt: skip

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, prog_bar=True, on_step=True, on_epoch=True)
        return loss

    def _shared_eval(self, batch, prefix):
        x, y = batch
        logits = self(x)
        self.log(f"{prefix}_loss", F.cross_entropy(logits, y), prog_bar=True, on_epoch=True)
        self.log(f"{prefix}_acc", (logits.argmax(dim=1) == y).float().mean(), prog_bar=True, on_epoch=True)

    def validation_step(self, batch, batch_idx):
        self._shared_eval(batch, "val")

    def test_step(self, batch, batch_idx):
        self._shared_eval(batch, "test")

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=2)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "val_loss",
                                                         "interval": "epoch", "frequency": 1}}  # fmt: skip


class DigitsDataModule(L.DataModule):  # was: L.LightningDataModule
    def __init__(self, batch_size: int = 64):
        super().__init__()
        self.batch_size = batch_size

    def prepare_data(self):
        from sklearn.datasets import load_digits

        load_digits()

    def setup(self, stage=None):
        from sklearn.datasets import load_digits

        digits = load_digits()
        full = TensorDataset(
            torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0, torch.tensor(digits.target)
        )
        self.train_set, self.val_set, self.test_set = random_split(
            full, [1257, 270, 270], generator=torch.Generator().manual_seed(42)
        )

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.batch_size)

    def test_dataloader(self):
        return DataLoader(self.test_set, batch_size=self.batch_size)


def test_a_lightning_module_runs_unchanged_but_for_imports(tmp_path):
    L.seed_everything(42)
    model = LitDigits(hidden=128)
    dm = DigitsDataModule()
    checkpoint = ModelCheckpoint(
        monitor="val_acc", mode="max", save_top_k=1, filename="best-{epoch}-{val_acc:.3f}"
    )
    trainer = L.Trainer(max_epochs=25, callbacks=[checkpoint, EarlyStopping(monitor="val_loss", patience=5)],
                        default_root_dir=tmp_path, enable_progress_bar=False, log_every_n_steps=10)  # fmt: skip
    trainer.fit(model, datamodule=dm)
    assert model.hparams.hidden == 128 and model.hparams.lr == 3e-3
    assert trainer.checkpoint_callback.best_model_path.endswith(".ckpt")
    assert "best-epoch=" in trainer.checkpoint_callback.best_model_path
    result = trainer.test(model, datamodule=dm, ckpt_path="best")
    assert (
        result[0]["test_acc"] >= 0.95
    )  # it learned (chance is 0.1); the exact value follows the RNG sequence
    assert (tmp_path / "surge_logs" / "version_0" / "hparams.yaml").read_text().startswith("hidden: 128")
