"""Persistent DataLoader workers end with the stage that started them (not 5 s later each, from the
garbage collector), and a later fit starts new ones."""

from __future__ import annotations

import psutil
import torch
from torch.utils.data import DataLoader, TensorDataset

import surge
from helpers import TinyModel


class RecordWorkers(surge.callbacks.Callback):
    def __init__(self) -> None:
        self.before = {p.pid for p in psutil.Process().children()}  # other tests' processes, if any
        self.pids: set[int] = set()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.pids |= {p.pid for p in psutil.Process().children()} - self.before


def test_fit_stops_the_persistent_workers_it_started(tmp_path):
    x = torch.randn(32, 4)
    loader = DataLoader(
        TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8, num_workers=2, persistent_workers=True
    )
    for run in range(2):
        seen = RecordWorkers()
        trainer = surge.Trainer(default_root_dir=tmp_path, max_epochs=2, logger=False, enable_progress_bar=False,
                                enable_checkpointing=False, enable_model_summary=False, callbacks=[seen])  # fmt: skip
        trainer.fit(TinyModel(), loader)
        assert len(seen.pids) >= 2, f"run {run}: the workers were not seen"
        assert not [
            pid for pid in seen.pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
        ]
