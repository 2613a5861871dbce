"""A module whose layers are created in `configure_model` (as for sharded training), trained
briefly, saved with `trainer.save_checkpoint`, then loaded with `load_from_checkpoint`: the layers
must exist before the weights load. `on_load_checkpoint` records what it sees."""

import lightning.pytorch as pl
import record
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LateLayers(pl.LightningModule):
    def __init__(self, width: int = 8):
        super().__init__()
        self.save_hyperparameters()
        self.net = None
        self.events = []

    def configure_model(self):
        self.events.append("configure_model")
        if self.net is None:
            self.net = nn.Sequential(
                nn.Linear(4, self.hparams.width), nn.ReLU(), nn.Linear(self.hparams.width, 1)
            )

    def on_load_checkpoint(self, checkpoint):
        self.events.append("on_load_checkpoint")
        # What the module holds when the hook runs: its own layers, not yet the checkpoint's weights.
        record.put(
            "weights_loaded_in_hook",
            torch.equal(self.net[0].weight, checkpoint["state_dict"]["net.0.weight"]),
        )
        record.put("checkpoint_keys", sorted(checkpoint["state_dict"]))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main():
    pl.seed_everything(2)
    x = torch.randn(32, 4)
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
    model = LateLayers()
    trainer = pl.Trainer(
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, loader)
    trainer.save_checkpoint("late.ckpt")
    loaded = LateLayers.load_from_checkpoint("late.ckpt")
    record.put("events", loaded.events)
    record.put("same_prediction", torch.equal(loaded.net(x), model.net(x)))
    record.weights("trained", model)
    record.weights("loaded", loaded)


if __name__ == "__main__":
    main()
