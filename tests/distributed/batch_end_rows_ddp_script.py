"""A job for tests/distributed/test_batch_end_rows_ddp.py: `python batch_end_rows_ddp_script.py --out DIR`.

Two ranks train 6 steps, logging every step. `training_step` logs a synced value; in
`on_train_batch_end` a callback logs a synced value on every rank and another value on rank zero
only; then a checkpoint is saved, in that hook too. Rank zero's metrics.csv and the checkpoints are
the record; a rank that reads its row alone (the checkpoint's copy on rank zero, the row of a value
logged on one rank) must not start a collective the other rank never joins.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

import surge
from surge.callbacks import ModelCheckpoint
from surge.loggers import CSVLogger


class Regressor(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        loss = torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1])
        self.log("synced_rank", float(self.global_rank), sync_dist=True)  # the mean over ranks: 0.5
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class LogsAtBatchEnd(surge.callbacks.Callback):
    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        step = trainer.global_step
        module.log("end_synced", float(step + trainer.global_rank), sync_dist=True)  # mean: step + 0.5
        if trainer.is_global_zero:  # one rank only: its row's read stays its own
            module.log("end_rank_zero", float(step))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    surge.seed_everything(0)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(48, 4, generator=g), torch.randn(48, 1, generator=g))
    trainer = surge.Trainer(
        accelerator="cpu", devices=2, strategy="ddp", max_steps=6, log_every_n_steps=1,
        logger=CSVLogger(args.out, name="rows", version=0), enable_progress_bar=False, enable_model_summary=False,
        callbacks=[LogsAtBatchEnd(), ModelCheckpoint(args.out / "ckpt", every_n_train_steps=1, save_top_k=-1)],
    )  # fmt: skip
    trainer.fit(Regressor(), DataLoader(data, batch_size=4))


if __name__ == "__main__":
    main()
