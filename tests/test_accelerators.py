"""Device resolution: logical indices, clear errors naming what exists, batches moved whole."""

from __future__ import annotations

import collections
import dataclasses

import pytest
import torch

import surge
from surge.accelerators import CPUAccelerator, CUDAAccelerator, resolve_accelerator, resolve_devices
from surge.data import move_to_device


@pytest.fixture
def four_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)


def test_explicit_indices_are_logical_and_need_no_visible_devices(four_gpus):
    assert resolve_devices(CUDAAccelerator(), [2, 3]) == [2, 3]
    assert resolve_devices(CUDAAccelerator(), 2) == [0, 1]
    assert resolve_devices(CUDAAccelerator(), -1) == [0, 1, 2, 3]
    assert CUDAAccelerator().device(3) == torch.device("cuda", 3)


def test_missing_devices_say_what_exists(four_gpus):
    with pytest.raises(surge.MisconfigurationError, match=r"indices \[4, 7\] do not exist.*sees 4"):
        resolve_devices(CUDAAccelerator(), [1, 4, 7])
    with pytest.raises(surge.MisconfigurationError, match="6 cuda devices were requested, but 4 exist"):
        resolve_devices(CUDAAccelerator(), 6)


def test_auto_falls_back_to_cpu_and_cpu_counts_processes():
    if not torch.cuda.is_available():
        assert isinstance(resolve_accelerator("auto"), CPUAccelerator)
    assert resolve_devices(CPUAccelerator(), "auto") == [0]
    with pytest.raises(surge.MisconfigurationError, match="accelerator is cpu"):
        resolve_devices(CPUAccelerator(), [0, 1])


Pair = collections.namedtuple("Pair", "x y")


@dataclasses.dataclass
class Batch:
    images: torch.Tensor
    labels: list


def test_nested_batches_keep_their_types():
    batch = {
        "a": (torch.ones(1), [torch.zeros(2)]),
        "p": Pair(torch.ones(1), "text"),
        "d": Batch(torch.ones(2), [1]),
    }
    moved = move_to_device(batch, torch.device("cpu"))
    assert isinstance(moved["a"], tuple) and isinstance(moved["a"][1], list)
    assert isinstance(moved["p"], Pair) and moved["p"].y == "text"
    assert isinstance(moved["d"], Batch) and moved["d"].labels == [1]


def test_transfer_batch_to_device_override_is_used(tmp_path):
    class Custom(surge.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 1)
            self.calls = 0

        def transfer_batch_to_device(self, batch, device, dataloader_idx):
            self.calls += 1
            return batch

        def training_step(self, batch, batch_idx):
            return self.lin(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    model = Custom()
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 2)), batch_size=4)
    surge.Trainer(
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    ).fit(model, data)
    assert model.calls == 2
