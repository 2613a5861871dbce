"""Whether a resumed fit runs the sanity check, from checkpoints written at each point of an epoch:
every file a first fit's ModelCheckpoint wrote is resumed in turn by a new Trainer, and the
sanity-check and validation calls each resume makes are recorded (with the epoch and step).

Argument: the save point. "epoch_end": ModelCheckpoint's default (at the training epoch's end,
after its validation); "validation_end": at the end of validation (`save_on_train_epoch_end=False`,
monitoring a validation value); "mid_epoch_validation": the same with `val_check_interval=0.5`;
"every_step": `every_n_train_steps=1` (inside the epoch and at its last batch, before validation)."""

import glob
import sys

import lightning as L
import record
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

CASE = sys.argv[1]
CALLS = []


class Calls(Callback):
    def on_sanity_check_start(self, trainer, pl_module):
        CALLS.append(["sanity", trainer.current_epoch, trainer.global_step])

    def on_validation_start(self, trainer, pl_module):
        CALLS.append(["validation", trainer.sanity_checking, trainer.current_epoch, trainer.global_step])


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        self.log("v", self.layer(batch[0]).mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def checkpointing():
    name = {"filename": "{epoch}-{step}", "dirpath": "ck", "save_top_k": -1}
    if CASE == "epoch_end":
        return ModelCheckpoint(**name)
    if CASE in ("validation_end", "mid_epoch_validation"):
        return ModelCheckpoint(monitor="v", save_on_train_epoch_end=False, **name)
    return ModelCheckpoint(every_n_train_steps=1, **name)


def trainer(max_epochs):
    return L.Trainer(
        accelerator="cpu", devices=1, max_epochs=max_epochs, num_sanity_val_steps=1, limit_val_batches=1,
        logger=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=".",
        callbacks=[Calls(), checkpointing()], val_check_interval=0.5 if CASE == "mid_epoch_validation" else 1.0,
    )  # fmt: skip


def main():
    L.seed_everything(0)
    data = TensorDataset(torch.randn(16, 4, generator=torch.Generator().manual_seed(1)))
    trainer(1).fit(Regressor(), DataLoader(data, batch_size=4), DataLoader(data, batch_size=4))
    record.put("first", list(CALLS))
    for path in sorted(glob.glob("ck/*.ckpt")):
        CALLS.clear()
        trainer(2).fit(
            Regressor(), DataLoader(data, batch_size=4), DataLoader(data, batch_size=4), ckpt_path=path
        )
        record.put(path.rsplit("/", 1)[-1], list(CALLS))


if __name__ == "__main__":
    main()
