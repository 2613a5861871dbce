"""What a project logs, each kind of row Lightning's CSVLogger writes: training step values at
`log_every_n_steps`, epoch means, per-batch validation and test values (`on_step=True`) over two
validation loaders, a running reward kept as a Python float, a key logged with `logger=False`,
LearningRateMonitor (a named per-step scheduler, named and unnamed param groups, momentum),
`validate()` after `fit()`, and the module's hyper-parameters."""

import lightning as L
import record
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self, width=8, lr=0.05, gamma=0.5):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(4, width), nn.Tanh(), nn.Linear(width, 1))
        self.reward = 0.0

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        self.reward += 0.1
        self.log("reward", self.reward)
        self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        self.log("val_loss", loss)
        self.log("val_batch_loss", loss, on_step=True, on_epoch=False)
        self.log("unlogged", loss, on_step=True, logger=False)

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", F.mse_loss(self.net(x), y), on_step=True, on_epoch=True)

    def configure_optimizers(self):
        groups = [{"params": self.net[0].parameters(), "name": "body"}, {"params": self.net[2].parameters()}]
        optimizer = torch.optim.Adam(groups, lr=self.hparams.lr)
        warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 4))
        return [optimizer], [{"scheduler": warmup, "interval": "step", "name": "warmup"}]


def loader(n, seed, batch_size=8):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=batch_size)


def main():
    L.seed_everything(5)
    trainer = L.Trainer(
        max_epochs=3,
        logger=CSVLogger(save_dir=".", name="logs"),
        log_every_n_steps=3,
        callbacks=[LearningRateMonitor(log_momentum=True)],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    model = Regressor()
    trainer.fit(model, loader(64, 0), [loader(24, 1), loader(16, 2)])
    trainer.validate(model, [loader(24, 1), loader(16, 2)], verbose=False)
    trainer.test(model, loader(16, 3), verbose=False)
    record.put("logged", sorted(trainer.logged_metrics))
    record.weights("final", model)


if __name__ == "__main__":
    main()
