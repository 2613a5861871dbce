"""A datamodule whose prepare_data() writes the data to disk and whose setup(stage) reads and
splits it, and a module that builds its layers in setup(stage) from what the datamodule found,
with teardown(stage) on both; unmodified. Every hook call is recorded in order."""

import json
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback
from torch.utils.data import DataLoader, TensorDataset, random_split

EVENTS = []


class CSVData(L.LightningDataModule):
    def __init__(self, data_dir="data", batch_size=10):
        super().__init__()
        self.data_dir = Path(data_dir)
        self.batch_size = batch_size
        self.num_features = None

    def prepare_data(self):
        EVENTS.append("dm.prepare_data")
        self.data_dir.mkdir(exist_ok=True)
        g = torch.Generator().manual_seed(0)
        x = torch.randn(50, 3, generator=g)
        y = (x.sum(1) > 0).long()
        torch.save({"x": x, "y": y}, self.data_dir / "data.pt")

    def setup(self, stage):
        EVENTS.append(f"dm.setup:{stage}")
        saved = torch.load(self.data_dir / "data.pt")
        full = TensorDataset(saved["x"], saved["y"])
        self.num_features = saved["x"].shape[1]
        if stage == "fit":
            self.train_set, self.val_set = random_split(
                full, [40, 10], generator=torch.Generator().manual_seed(1)
            )
        if stage == "test":
            self.test_set = full

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.batch_size)

    def test_dataloader(self):
        return DataLoader(self.test_set, batch_size=self.batch_size)

    def teardown(self, stage):
        EVENTS.append(f"dm.teardown:{stage}")


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = None

    def prepare_data(self):
        EVENTS.append("model.prepare_data")

    def setup(self, stage):
        EVENTS.append(f"model.setup:{stage}")
        if self.net is None:  # built once, from the data the datamodule's setup read
            self.net = torch.nn.Linear(self.trainer.datamodule.num_features, 2)

    def configure_optimizers(self):
        EVENTS.append("model.configure_optimizers")
        return torch.optim.SGD(self.net.parameters(), lr=0.5)

    def on_fit_start(self):
        EVENTS.append("model.on_fit_start")

    def on_fit_end(self):
        EVENTS.append("model.on_fit_end")

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_acc", (self.net(x).argmax(1) == y).float().mean())

    def teardown(self, stage):
        EVENTS.append(f"model.teardown:{stage}")


class Tracker(Callback):
    def setup(self, trainer, pl_module, stage):
        EVENTS.append(f"callback.setup:{stage}")

    def teardown(self, trainer, pl_module, stage):
        EVENTS.append(f"callback.teardown:{stage}")


def main():
    L.seed_everything(0)
    dm = CSVData()
    model = Classifier()
    trainer = L.Trainer(
        max_epochs=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        callbacks=[Tracker()],
    )
    trainer.fit(model, datamodule=dm)
    initial_net = model.net
    net_in_optimizer = trainer.optimizers[0].param_groups[0]["params"][0] is model.net.weight
    fit_events = list(EVENTS)
    EVENTS.clear()
    tested = trainer.test(model, datamodule=dm)
    print(
        json.dumps(
            {
                "fit_events": fit_events,
                "test_events": EVENTS,
                "global_step": trainer.global_step,
                "num_features": dm.num_features,
                "net_in_optimizer": net_in_optimizer,
                "same_net_in_test": model.net is initial_net,
                "test_acc": tested[0]["test_acc"],
            }
        )
    )


if __name__ == "__main__":
    main()
