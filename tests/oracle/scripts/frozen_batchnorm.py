"""Frozen-BatchNorm fine-tuning: a backbone with BatchNorm put in eval mode (in `__init__`, or in
`on_train_epoch_start`) trains 3 epochs with validation on small batches; the backbone must stay
in eval mode through validation, so its running statistics never move. Usage: `... init|epoch_start`."""

import sys

import lightning.pytorch as pl
import record
import torch
from torch.utils.data import DataLoader, TensorDataset

WHERE = sys.argv[1] if len(sys.argv) > 1 else "init"


class FineTune(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.backbone = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU())
        self.head = torch.nn.Sequential(
            torch.nn.Linear(16, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1)
        )
        if WHERE == "init":
            self.backbone.eval()

    def on_train_epoch_start(self):
        if WHERE == "epoch_start":
            self.backbone.eval()
        record.append("modes_at_epoch_start", [self.backbone.training, self.head.training])

    def training_step(self, batch, batch_idx):
        x, y = batch
        record.append("modes_in_training_step", [self.backbone[1].training, self.head[1].training])
        return torch.nn.functional.mse_loss(self.head(self.backbone(x)), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.head(self.backbone(x)), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


pl.seed_everything(3)
x, y = torch.randn(24, 8), torch.randn(24, 1)
model = FineTune()
trainer = pl.Trainer(
    max_epochs=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
    enable_model_summary=False, num_sanity_val_steps=2,
)  # fmt: skip
trainer.fit(
    model, DataLoader(TensorDataset(x, y), batch_size=4), DataLoader(TensorDataset(x, y), batch_size=4)
)
record.put("modes_after_fit", [m.training for m in model.modules()])
record.put("callback_metrics", record.metrics(trainer))
record.weights("final", model)
