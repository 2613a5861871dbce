"""Two Trainers in one process, each on the same two gloo ranks: `python heartbeat_script.py OUT`.

The process group the first Trainer started lives on for the second. Each rank records, at the end
of the second fit's training, whether its own heartbeat and its peer's reached the group's store
after that fit began; rank zero writes {rank: seconds from the fit's start to the beat} to OUT.
"""

from __future__ import annotations

import datetime
import json
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

import surge
from surge.strategies.hang_watch import group_store_address


class Net(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Beats(surge.callbacks.Callback):
    """At the end of training: the first heartbeat of each rank written after `began` (up to 5 s)."""

    def __init__(self, began: float) -> None:
        self.began = began
        self.seen: dict[int, float] = {}

    def on_train_end(self, trainer, module):
        addr, port = group_store_address("unknown", -1)
        client = dist.TCPStore(addr, port, is_master=False, wait_for_workers=False,
                               timeout=datetime.timedelta(seconds=5))  # fmt: skip
        store = dist.PrefixStore("surge/hang/0/", client)
        deadline = time.time() + 5
        while len(self.seen) < 2 and time.time() < deadline:
            for rank in range(2):
                if rank not in self.seen and store.check([f"beat/{rank}"]):
                    beat = json.loads(store.get(f"beat/{rank}"))
                    if beat["t"] >= self.began:
                        self.seen[rank] = beat["t"] - self.began
            time.sleep(0.1)


def fit(callbacks: list) -> surge.Trainer:
    trainer = surge.Trainer(accelerator="cpu", devices=2, max_epochs=1, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks)  # fmt: skip
    trainer.fit(Net(), DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4))
    return trainer


if __name__ == "__main__":
    fit([])
    beats = Beats(time.time())
    second = fit([beats])
    if second.is_global_zero:
        Path(sys.argv[1]).write_text(json.dumps(beats.seen))
