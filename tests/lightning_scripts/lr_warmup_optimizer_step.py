"""Learning-rate warm-up in an `optimizer_step` override, as in Lightning's LightningModule docs;
unmodified. Saves the data, the initial and final weights and the lr of each step to warmup.pt."""

import json

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

WARMUP_STEPS = 5


class Model(L.LightningModule):
    def __init__(self, learning_rate=0.1):
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(4, 1)
        self.lrs = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.lrs.append(self.trainer.optimizers[0].param_groups[0]["lr"])
        return F.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.learning_rate, momentum=0.9)

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
        # update params
        optimizer.step(closure=optimizer_closure)

        # manually warm up lr without a scheduler
        if self.trainer.global_step < WARMUP_STEPS:
            lr_scale = min(1.0, float(self.trainer.global_step + 1) / WARMUP_STEPS)
            for pg in optimizer.param_groups:
                pg["lr"] = lr_scale * self.hparams.learning_rate


def main():
    L.seed_everything(11)
    x = torch.randn(24, 4)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1
    model = Model()
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = L.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=4))
    final = {k: v.clone() for k, v in model.state_dict().items()}
    torch.save({"x": x, "y": y, "initial": initial, "final": final, "lrs": model.lrs}, "warmup.pt")
    print(json.dumps({"global_step": trainer.global_step, "lrs": model.lrs}))


if __name__ == "__main__":
    main()
