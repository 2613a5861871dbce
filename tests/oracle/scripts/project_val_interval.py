"""Validation four times an epoch of ten batches (`val_check_interval=0.3`: every 3 batches, which
does not divide the epoch), as long-epoch projects write it; a dataset with random augmentation
in `__getitem__`, a shuffled loader, three epochs, an epoch-interval StepLR."""

import lightning as L
import record
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Jittered(Dataset):
    def __init__(self, n, seed, jitter):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 8, generator=g)
        self.y = (self.x.sum(1, keepdim=True) > 0).float()
        self.jitter = jitter

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i] + self.jitter * torch.randn(8), self.y[i]


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.binary_cross_entropy_with_logits(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.binary_cross_entropy_with_logits(self.net(x), y), prog_bar=True)

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=0.01)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]


class CountValidations(L.Callback):
    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking:
            record.append("validated_at", [trainer.current_epoch, trainer.global_step])


def main():
    L.seed_everything(3)
    train = DataLoader(Jittered(80, 0, 0.1), batch_size=8, shuffle=True)
    val = DataLoader(Jittered(24, 1, 0.0), batch_size=8)
    trainer = L.Trainer(
        max_epochs=3,
        val_check_interval=0.3,
        callbacks=[CountValidations(), ModelCheckpoint(dirpath="ckpts", monitor="val_loss", save_top_k=3)],
        logger=CSVLogger(save_dir=".", name="logs"),
        log_every_n_steps=4,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Model()
    trainer.fit(model, train, val)
    record.put("after_fit", record.metrics(trainer))
    record.weights("final", model)


if __name__ == "__main__":
    main()
