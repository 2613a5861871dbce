"""Trains 3 epochs of 30 steps, slowly enough to be signalled mid-run; writes the weights at the end.

Arguments: root, out, marker[, num_workers[, persistent_workers (0/1)]].
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

import surge


class Slow(surge.Module):
    def __init__(self, marker: Path) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 1)
        self.marker = marker

    def training_step(self, batch, batch_idx):
        x, y = batch
        if self.global_step == 5:
            self.marker.write_text("running")
        time.sleep(0.02)
        return torch.nn.functional.mse_loss(self.lin(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main(root: str, out: str, marker: str, workers: str = "0", persistent: str = "0") -> None:
    surge.seed_everything(0)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(120, 4, generator=g)
    extra = {"persistent_workers": persistent == "1"} if int(workers) else {}
    data = TensorDataset(x, x.sum(1, keepdim=True))
    loader = DataLoader(data, batch_size=4, shuffle=True, num_workers=int(workers), **extra)
    trainer = surge.Trainer(
        max_epochs=3,
        default_root_dir=root,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
    )
    model = Slow(Path(marker))
    trainer.fit(model, loader, ckpt_path="auto")
    torch.save({k: v.clone() for k, v in model.state_dict().items()}, out)


def group_processes(pgid: int) -> list[str]:
    """The live processes of process group `pgid` ("pid command"), read from /proc; zombies left out."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # it ended while we looked
            continue
        state, _ppid, group = text[text.rindex(")") + 2 :].split()[:3]
        if int(group) == pgid and state != "Z":
            found.append(f"{stat.parent.name} {text[text.index('(') + 1 : text.rindex(')')]}")
    return found


if __name__ == "__main__":
    main(*sys.argv[1:])
