"""Two gloo processes with reload_dataloaders_every_n_epochs=1 and a dataset that grows each epoch:
each rank writes the sample ids it trained on, per epoch, to `--out`/rank<R>.json."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import surge


class Growing(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(1, 2)
        self.ids: dict[int, list[int]] = {}
        self.planned: dict[int, float] = {}

    def train_dataloader(self) -> DataLoader:
        n = 16 + 8 * self.current_epoch  # 16, 24, 32 samples
        ids = torch.arange(n, dtype=torch.float32).unsqueeze(1)
        return DataLoader(TensorDataset(ids, (ids[:, 0] % 2).long()), batch_size=2, shuffle=True)

    def on_train_epoch_start(self) -> None:
        self.planned[self.current_epoch] = float(self.trainer.num_training_batches)

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.ids.setdefault(self.current_epoch, []).extend(int(i) for i in x[:, 0])
        return F.cross_entropy(self.lin(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    surge.seed_everything(0)
    model = Growing()
    trainer = surge.Trainer(
        accelerator="cpu", devices=2, max_epochs=3, reload_dataloaders_every_n_epochs=1,
        default_root_dir=args.root, enable_progress_bar=False, enable_model_summary=False,
        logger=False, enable_checkpointing=False,
    )  # fmt: skip
    trainer.fit(model)
    got = {"ids": model.ids, "planned": model.planned}
    (Path(args.out) / f"rank{trainer.global_rank}.json").write_text(json.dumps(got))


if __name__ == "__main__":
    main()
