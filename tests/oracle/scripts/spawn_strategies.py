"""`strategy="ddp_fork"` (fit, validate, test) and `"ddp_spawn"` (fit) on 2 CPU processes: what the
main process sees after each stage (weights, `trainer.state`, `global_step`, `current_epoch`,
`callback_metrics`, the best checkpoint's name, the stage's results)."""

from pathlib import Path

import lightning.pytorch as pl
import record
import torch
from torch.utils.data import DataLoader, TensorDataset


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def _loss(self, batch):
        return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

    def training_step(self, batch, batch_idx):
        loss = self._loss(batch)
        self.log("train_loss", loss, on_epoch=True, sync_dist=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self._loss(batch), sync_dist=True)

    def test_step(self, batch, batch_idx):
        self.log("test_loss", self._loss(batch), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def data(shuffle):
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4, shuffle=shuffle)


def seen(name, trainer, result=None):
    state = trainer.state
    record.put(f"{name}/state", [str(state.status), str(state.fn), str(state.stage)])
    record.put(f"{name}/steps", [trainer.global_step, trainer.current_epoch])
    record.put(f"{name}/callback_metrics", record.metrics(trainer))
    record.put(f"{name}/best", Path(trainer.checkpoint_callback.best_model_path).name)
    record.put(f"{name}/result", result)


def run(strategy, stages):
    pl.seed_everything(7)
    model = Model()
    trainer = pl.Trainer(
        accelerator="cpu", devices=2, strategy=strategy, max_epochs=2, logger=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=strategy,
    )  # fmt: skip
    trainer.fit(model, data(True), data(False))
    seen(f"{strategy}/fit", trainer)
    record.weights(f"{strategy}_fit", model)
    record.put(f"{strategy}/module_is_model", trainer.lightning_module is model)
    for stage in stages:
        result = getattr(trainer, stage)(model, data(False), verbose=False)
        seen(f"{strategy}/{stage}", trainer, result)


if __name__ == "__main__":
    run("ddp_fork", ("validate", "test"))
    run("ddp_spawn", ())
