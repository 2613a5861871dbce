"""Two validation dataloaders (and one test dataloader), as in Lightning's docs on multiple
dataloaders; unmodified. `validation_step` takes `dataloader_idx=0`; a metric logged in it gets
`/dataloader_idx_N` appended unless `add_dataloader_idx=False`."""

import json

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def values(*xs):
    return TensorDataset(torch.tensor(xs, dtype=torch.float32)[:, None])


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.calls = []

    def training_step(self, batch, batch_idx):
        (x,) = batch
        return F.mse_loss(self.layer(x), 2 * x)

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        (x,) = batch
        self.calls.append((self.trainer.sanity_checking, dataloader_idx, batch_idx))
        self.log("val_mean", x.mean())
        self.log(["mean_a", "mean_b"][dataloader_idx], x.mean(), add_dataloader_idx=False)

    def test_step(self, batch, batch_idx, dataloader_idx=0):
        (x,) = batch
        self.log("test_mean", x.mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return DataLoader(values(1, 2, 3, 4), batch_size=2)

    def val_dataloader(self):
        # loader 0: batch means 2, 5, 8 (epoch mean 5); loader 1: 10, 20 (epoch mean 15)
        return [DataLoader(values(*range(1, 10)), batch_size=3), DataLoader(values(10, 20), batch_size=1)]

    def test_dataloader(self):
        return DataLoader(values(3, 5), batch_size=2)


def floats(metrics):
    return {k: float(v) for k, v in sorted(metrics.items())}


def main():
    model = Model()
    trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(model)
    fit_calls, model.calls = model.calls, []
    after_fit = floats(trainer.callback_metrics)
    validated = trainer.validate(model)
    tested = trainer.test(model)
    print(
        json.dumps(
            {
                "fit_calls": fit_calls,
                "validate_calls": model.calls,
                "callback_metrics": after_fit,
                "validated": [floats(m) for m in validated],
                "tested": [floats(m) for m in tested],
            }
        )
    )


if __name__ == "__main__":
    main()
