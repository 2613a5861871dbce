"""The Lightning callbacks that read the device: DeviceStatsMonitor's CUDA memory statistics, and
SWA's average kept on the CPU (its default) while the module trains on the GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

import surge
from helpers import FAST_DEFAULTS, TinyModel, make_dataset
from surge.callbacks import DeviceStatsMonitor, StochasticWeightAveraging

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _trainer(**kwargs) -> surge.Trainer:
    return surge.Trainer(**{**FAST_DEFAULTS, "accelerator": "cuda", "devices": 1, **kwargs})


def test_device_stats_monitor_logs_cuda_memory(tmp_path):
    import csv

    from surge.loggers import CSVLogger

    logger = CSVLogger(tmp_path)
    trainer = _trainer(logger=logger, log_every_n_steps=2, callbacks=[DeviceStatsMonitor(cpu_stats=False)])
    trainer.fit(TinyModel(), DataLoader(make_dataset(32), batch_size=4))
    logger.save()
    with open(Path(logger.log_dir) / "metrics.csv") as f:
        rows = list(csv.DictReader(f))  # to the loggers only, as Lightning's
    key = "DeviceStatsMonitor.on_train_batch_end/allocated_bytes.all.current"
    assert any(r.get(key) and float(r[key]) > 0 for r in rows)
    assert not any("cpu_percent" in k for k in rows[0])


def test_swa_average_on_the_cpu_is_transferred_to_the_gpu_module():
    model = TinyModel()
    swa = StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=2)
    _trainer(max_epochs=3, callbacks=[swa]).fit(model, DataLoader(make_dataset(32), batch_size=8))
    assert all(t.device.type == "cpu" for t in swa.state_dict()["average"])
    assert all(p.device.type == "cuda" for p in model.parameters())
    for avg, p in zip(swa.state_dict()["average"], model.parameters()):
        assert torch.equal(avg, p.detach().cpu())
