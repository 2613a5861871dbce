"""A Lightning + Hydra-style template (as lightning-hydra-template writes its MNIST example) on
scikit-learn's shipped digits: a DataModule with a seeded random split, torchmetrics (Accuracy,
MeanMetric, MaxMetric), ReduceLROnPlateau on a validation metric, and every callback argument
written out as the template's YAML configs do; fit, then test the best checkpoint.

`--ddp` runs the same on two CPU processes (gloo)."""

import sys
from functools import partial  # what Hydra's `_partial_: true` builds

import lightning as L
import record
import torch
from lightning.pytorch.callbacks import (
    EarlyStopping,
    LearningRateMonitor,
    ModelCheckpoint,
    ModelSummary,
    TQDMProgressBar,
)
from lightning.pytorch.loggers import CSVLogger
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split
from torchmetrics import MaxMetric, MeanMetric
from torchmetrics.classification.accuracy import Accuracy


class DigitsDataModule(L.LightningDataModule):
    def __init__(self, train_val_test_split=(1000, 397, 400), batch_size=64, num_workers=0, pin_memory=False):
        super().__init__()
        self.save_hyperparameters(logger=False)
        self.data_train = self.data_val = self.data_test = None

    @property
    def num_classes(self):
        return 10

    def prepare_data(self):
        load_digits()  # shipped with scikit-learn: nothing to download

    def setup(self, stage=None):
        if self.data_train is None:
            x, y = load_digits(return_X_y=True)
            dataset = TensorDataset(torch.tensor(x, dtype=torch.float32) / 16.0, torch.tensor(y))
            self.data_train, self.data_val, self.data_test = random_split(
                dataset, self.hparams.train_val_test_split, generator=torch.Generator().manual_seed(42)
            )

    def _loader(self, data, shuffle):
        return DataLoader(
            data,
            batch_size=self.hparams.batch_size,
            num_workers=self.hparams.num_workers,
            pin_memory=self.hparams.pin_memory,
            shuffle=shuffle,
        )

    def train_dataloader(self):
        return self._loader(self.data_train, True)

    def val_dataloader(self):
        return self._loader(self.data_val, False)

    def test_dataloader(self):
        return self._loader(self.data_test, False)


class SimpleDenseNet(nn.Module):
    def __init__(self, input_size=64, lin1_size=32, lin2_size=32, output_size=10):
        super().__init__()
        self.model = nn.Sequential(
            nn.Linear(input_size, lin1_size),
            nn.BatchNorm1d(lin1_size),
            nn.ReLU(),
            nn.Linear(lin1_size, lin2_size),
            nn.BatchNorm1d(lin2_size),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(lin2_size, output_size),
        )

    def forward(self, x):
        return self.model(x)


class DigitsLitModule(L.LightningModule):
    def __init__(self, net, optimizer, scheduler, compile=False):
        super().__init__()
        self.save_hyperparameters(logger=False, ignore=["net"])
        self.net = net
        self.criterion = nn.CrossEntropyLoss()
        self.train_acc = Accuracy(task="multiclass", num_classes=10)
        self.val_acc = Accuracy(task="multiclass", num_classes=10)
        self.test_acc = Accuracy(task="multiclass", num_classes=10)
        self.train_loss, self.val_loss, self.test_loss = MeanMetric(), MeanMetric(), MeanMetric()
        self.val_acc_best = MaxMetric()

    def forward(self, x):
        return self.net(x)

    def on_train_start(self):
        self.val_loss.reset()
        self.val_acc.reset()
        self.val_acc_best.reset()

    def model_step(self, batch):
        x, y = batch
        logits = self.forward(x)
        loss = self.criterion(logits, y)
        return loss, torch.argmax(logits, dim=1), y

    def training_step(self, batch, batch_idx):
        loss, preds, targets = self.model_step(batch)
        self.train_loss(loss)
        self.train_acc(preds, targets)
        self.log("train/loss", self.train_loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("train/acc", self.train_acc, on_step=False, on_epoch=True, prog_bar=True)
        return loss

    def on_train_epoch_end(self):
        pass

    def validation_step(self, batch, batch_idx):
        loss, preds, targets = self.model_step(batch)
        self.val_loss(loss)
        self.val_acc(preds, targets)
        self.log("val/loss", self.val_loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("val/acc", self.val_acc, on_step=False, on_epoch=True, prog_bar=True)

    def on_validation_epoch_end(self):
        acc = self.val_acc.compute()
        self.val_acc_best(acc)
        self.log("val/acc_best", self.val_acc_best.compute(), sync_dist=True, prog_bar=True)

    def test_step(self, batch, batch_idx):
        loss, preds, targets = self.model_step(batch)
        self.test_loss(loss)
        self.test_acc(preds, targets)
        self.log("test/loss", self.test_loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("test/acc", self.test_acc, on_step=False, on_epoch=True, prog_bar=True)

    def setup(self, stage):
        if self.hparams.compile and stage == "fit":
            self.net = torch.compile(self.net)

    def configure_optimizers(self):
        optimizer = self.hparams.optimizer(params=self.trainer.model.parameters())
        if self.hparams.scheduler is not None:
            scheduler = self.hparams.scheduler(optimizer=optimizer)
            return {
                "optimizer": optimizer,
                "lr_scheduler": {
                    "scheduler": scheduler,
                    "monitor": "val/loss",
                    "interval": "epoch",
                    "frequency": 1,
                },
            }
        return {"optimizer": optimizer}


# The checkpoint's hyper-parameters hold the partials; torch >= 2.6 loads weights-only by default.
torch.serialization.add_safe_globals([partial, torch.optim.Adam, torch.optim.lr_scheduler.ReduceLROnPlateau])


def callbacks():
    return [
        ModelCheckpoint(
            dirpath="ckpts",
            filename="epoch_{epoch:03d}",
            monitor="val/acc",
            verbose=False,
            save_last=True,
            save_top_k=1,
            mode="max",
            auto_insert_metric_name=False,
            save_weights_only=False,
            every_n_train_steps=None,
            train_time_interval=None,
            every_n_epochs=None,
            save_on_train_epoch_end=None,
        ),
        EarlyStopping(
            monitor="val/acc",
            min_delta=0.0,
            patience=100,
            verbose=False,
            mode="max",
            strict=True,
            check_finite=True,
            stopping_threshold=None,
            divergence_threshold=None,
            check_on_train_epoch_end=None,
        ),
        ModelSummary(max_depth=-1),
        TQDMProgressBar(refresh_rate=1, process_position=0, leave=False),
        LearningRateMonitor(logging_interval="epoch", log_momentum=False, log_weight_decay=False),
    ]


def main(ddp):
    L.seed_everything(12345, workers=True)
    # Under DDP the validation and test sets divide by the 2 processes: Lightning's DistributedSampler
    # pads an uneven evaluation set by repeating samples (counted twice); surge gives each sample to
    # one rank (docs/distributed.md), a deliberate difference this scenario does not compare.
    split = (999, 398, 400) if ddp else (1000, 397, 400)
    datamodule = DigitsDataModule(train_val_test_split=split, batch_size=50)
    model = DigitsLitModule(
        net=SimpleDenseNet(),
        optimizer=partial(torch.optim.Adam, lr=0.002, weight_decay=0.0),
        scheduler=partial(torch.optim.lr_scheduler.ReduceLROnPlateau, mode="min", factor=0.1, patience=0),
    )
    trainer = L.Trainer(
        default_root_dir=".",
        min_epochs=None,
        max_epochs=4,
        accelerator="cpu",
        devices=2 if ddp else 1,
        strategy="ddp" if ddp else "auto",
        check_val_every_n_epoch=1,
        deterministic=False,
        callbacks=callbacks(),
        logger=[CSVLogger(save_dir=".", name="csv", prefix="")],
        limit_train_batches=8,
    )
    trainer.fit(model=model, datamodule=datamodule, ckpt_path=None)
    record.put("after_fit", record.metrics(trainer))
    record.put("best_model_score", trainer.checkpoint_callback.best_model_score)
    record.put("lr", trainer.optimizers[0].param_groups[0]["lr"])
    record.weights("final", model)
    trainer.test(model=model, datamodule=datamodule, ckpt_path="best", verbose=False)
    record.put("after_test", record.metrics(trainer))


if __name__ == "__main__":
    main(ddp="--ddp" in sys.argv)
