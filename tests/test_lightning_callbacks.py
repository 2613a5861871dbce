"""Lightning's callbacks on surge, checked against Lightning's documented semantics: SWA and
backbone finetuning against the same training written by hand in plain PyTorch."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn
from torch.utils.data import DataLoader

import surge
from helpers import TinyModel, fast_trainer, make_dataset, make_loaders
from surge.callbacks import (
    BackboneFinetuning,
    BatchSizeFinder,
    DeviceStatsMonitor,
    GradientAccumulationScheduler,
    LearningRateFinder,
    OnExceptionCheckpoint,
    RichProgressBar,
    StochasticWeightAveraging,
    Timer,
)
from surge.errors import MisconfigurationError, SurgeError


def loader(n: int = 32, batch_size: int = 8) -> DataLoader:
    return DataLoader(make_dataset(n), batch_size=batch_size)


class BNModel(surge.Module):
    """Linear -> BatchNorm -> ReLU -> Linear, plain SGD: a model whose SWA needs a BatchNorm pass."""

    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
        self.lr = lr

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


# -- StochasticWeightAveraging ---------------------------------------------------------------


def swa_by_hand(model: nn.Module, data: DataLoader, epochs: int, swa_start: int, swa_lr: float, anneal: int) -> nn.Module:
    """Lightning's SWA in plain PyTorch: from epoch `swa_start` (0-based) SWALR replaces the rate and
    the weights at the start of each epoch join the average; at the end the module takes the
    average and BatchNorm statistics are recomputed over the training data."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    averaged = AveragedModel(model)
    scheduler = None
    for epoch in range(epochs):
        if epoch >= swa_start:
            if scheduler is None:
                for group in opt.param_groups:
                    group["initial_lr"] = swa_lr
                scheduler = SWALR(opt, swa_lr=swa_lr, anneal_epochs=anneal, anneal_strategy="cos", last_epoch=epochs)
            averaged.update_parameters(model)
        for x, y in data:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
        if scheduler is not None:
            scheduler.step()
    update_bn(data, averaged)
    return averaged.module


def test_swa_matches_the_same_averaging_by_hand():
    torch.manual_seed(0)
    model = BNModel()
    reference = swa_by_hand(copy.deepcopy(model), loader(), epochs=5, swa_start=2, swa_lr=0.05, anneal=2)
    swa = StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=3, annealing_epochs=2)
    fast_trainer(max_epochs=5, callbacks=[swa]).fit(model, loader())
    assert swa.swa_start == 2 and swa.swa_end == 4 and int(swa.n_averaged) == 3
    got, want = model.state_dict(), reference.state_dict()
    assert got.keys() == want.keys()
    for name in want:
        assert torch.allclose(got[name].float(), want[name].float(), atol=1e-6), name
    assert model.net[1].momentum == 0.1  # restored after the BatchNorm pass


def test_swa_replaces_the_scheduler_and_takes_a_fraction_of_max_epochs():
    torch.manual_seed(0)
    model = TinyModel(scheduler="step_epoch")
    swa = StochasticWeightAveraging(swa_lrs=0.02, swa_epoch_start=0.5, annealing_epochs=1)
    trainer = fast_trainer(max_epochs=4, callbacks=[swa])
    trainer.fit(model, loader())
    assert swa.swa_start == 1  # int(4 * 0.5) = 2, counted from 1
    assert type(trainer.lr_scheduler_configs[0].scheduler).__name__ == "SWALR"
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.02)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"swa_lrs": -0.1}, "swa_lrs"),
        ({"swa_lrs": 0.1, "swa_epoch_start": 0}, "swa_epoch_start"),
        ({"swa_lrs": 0.1, "swa_epoch_start": 1.5}, "swa_epoch_start"),
        ({"swa_lrs": 0.1, "annealing_strategy": "step"}, "annealing_strategy"),
        ({"swa_lrs": 0.1, "avg_fn": 3}, "avg_fn"),
    ],
)
def test_swa_refuses_bad_arguments(kwargs, named):
    with pytest.raises(SurgeError, match=named):
        StochasticWeightAveraging(**kwargs)
