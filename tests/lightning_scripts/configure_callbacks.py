"""A module whose `configure_callbacks()` returns its own EarlyStopping and ModelCheckpoint, which
replace the Trainer's of the same type, beside a custom callback; unmodified. The scripted
val_loss improves by more than min_delta once, then stops improving enough."""

import json
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

VAL_LOSS = [1.0, 0.8, 0.79, 0.9, 0.85, 0.7, 0.6, 0.5, 0.4, 0.3]


class History(Callback):
    def __init__(self):
        self.events = []
        self.callback_types = []

    def on_fit_start(self, trainer, pl_module):
        self.callback_types = [type(cb).__name__ for cb in trainer.callbacks]

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self.events.append(
                ["val", trainer.current_epoch, round(float(trainer.callback_metrics["val_loss"]), 4)]
            )

    def on_train_epoch_end(self, trainer, pl_module):
        self.events.append(["epoch_end", trainer.current_epoch, trainer.should_stop])


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self.layer(x), y)

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", VAL_LOSS[self.current_epoch])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def configure_callbacks(self):
        early_stop = EarlyStopping(monitor="val_loss", mode="min", patience=2, min_delta=0.05)
        checkpoint = ModelCheckpoint(monitor="val_loss", filename="best-{epoch}-{val_loss:.2f}", save_top_k=1)
        return [early_stop, checkpoint]


def main():
    data = TensorDataset(torch.randn(8, 2), torch.randn(8, 1))
    history = History()
    trainer = L.Trainer(
        max_epochs=10,
        logger=False,
        enable_progress_bar=False,
        callbacks=[
            ModelCheckpoint(dirpath="trainer_ckpts", save_top_k=-1),
            history,
            EarlyStopping(monitor="val_loss", patience=100),
        ],
    )
    trainer.fit(Model(), DataLoader(data, batch_size=4), DataLoader(data, batch_size=8))
    es, ckpt = trainer.early_stopping_callback, trainer.checkpoint_callback
    print(
        json.dumps(
            {
                "global_step": trainer.global_step,
                "current_epoch": trainer.current_epoch,
                "stopped_epoch": es.stopped_epoch,
                "patience": es.patience,
                "early_stopping_callbacks": len(trainer.early_stopping_callbacks),
                "checkpoint_callbacks": len(trainer.checkpoint_callbacks),
                "best_model_path": str(Path(ckpt.best_model_path).relative_to(Path.cwd())),
                "best_model_score": round(float(ckpt.best_model_score), 4),
                "trainer_ckpts_exists": Path("trainer_ckpts").exists(),
                "callback_types": history.callback_types,
                "events": history.events,
            }
        )
    )


if __name__ == "__main__":
    main()
