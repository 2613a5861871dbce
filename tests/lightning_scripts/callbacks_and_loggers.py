"""A Lightning training script with seed_everything, rank_zero_only, callbacks and a CSVLogger,
unmodified. Validation loss stops improving after epoch 1, so EarlyStopping(patience=2) ends the
fit after epoch 3 of 10."""

import sys

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import (
    Callback,
    EarlyStopping,
    LearningRateMonitor,
    ModelCheckpoint,
    TQDMProgressBar,
)
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self, lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Linear(8, 1)
        self.scripted_val = [1.0, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3]

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", torch.tensor(self.scripted_val[self.current_epoch]))

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
        return {
            "optimizer": opt,
            "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5),
        }


class EpochCounter(Callback):
    def __init__(self):
        self.epochs = 0

    def on_train_epoch_end(self, trainer, pl_module):
        self.epochs += 1


@rank_zero_only
def report(message):
    print(message)


def main(seed):
    L.seed_everything(seed)
    x = torch.randn(64, 8)
    y = x.sum(dim=1, keepdim=True)
    train = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    val = DataLoader(TensorDataset(x[:16], y[:16]), batch_size=16)
    counter = EpochCounter()
    trainer = L.Trainer(
        max_epochs=10,
        log_every_n_steps=2,
        logger=CSVLogger("logs", name="regression"),
        callbacks=[
            counter,
            EarlyStopping(monitor="val_loss", patience=2),
            ModelCheckpoint(monitor="val_loss", save_top_k=1),
            LearningRateMonitor(logging_interval="epoch"),
            TQDMProgressBar(refresh_rate=5),
        ],
    )
    model = Regressor()
    trainer.fit(model, train, val)
    rank_zero_info(f"best checkpoint: {trainer.checkpoint_callback.best_model_path}")
    weight_sum = float(model.net.weight.detach().sum())
    report(
        f"RESULT epochs={counter.epochs} global_step={trainer.global_step} "
        f"best={float(trainer.checkpoint_callback.best_model_score):.3f} log_dir={trainer.log_dir} "
        f"weight_sum={weight_sum:.8f}"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 42)
