"""torchmetrics objects that only `update()` on a batch, logged with `on_step=True` (training's
default, and torchmetrics' own Lightning example for validation): Lightning leaves their step value
out and logs their epoch value. Records `callback_metrics` and `logged_metrics` after the fit and
metrics.csv."""

import lightning as L
import record
import torch
import torchmetrics
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 3)
        self.train_acc = torchmetrics.classification.MulticlassAccuracy(num_classes=3)
        self.valid_acc = torchmetrics.classification.MulticlassAccuracy(num_classes=3)

    def training_step(self, batch, batch_idx):
        logits = self.layer(batch[0])
        self.train_acc.update(logits, batch[1])
        self.log("train_acc", self.train_acc)  # on_step by default in training
        return torch.nn.functional.cross_entropy(logits, batch[1])

    def validation_step(self, batch, batch_idx):
        self.valid_acc.update(self.layer(batch[0]), batch[1])
        self.log("valid_acc", self.valid_acc, on_step=True, on_epoch=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main():
    L.seed_everything(0)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(32, 4, generator=g), torch.randint(0, 3, (32,), generator=g))
    trainer = L.Trainer(
        accelerator="cpu", devices=1, max_epochs=2, log_every_n_steps=2, logger=CSVLogger(".", name="csv", version=0),
        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
    )  # fmt: skip
    trainer.fit(Classifier(), DataLoader(data, batch_size=8), DataLoader(data, batch_size=8))
    record.put("callback_metrics", {k: round(float(v), 6) for k, v in trainer.callback_metrics.items()})
    record.put("logged_metrics", {k: round(float(v), 6) for k, v in trainer.logged_metrics.items()})
    with open("csv/version_0/metrics.csv") as f:
        record.put("metrics.csv", f.read())


if __name__ == "__main__":
    main()
