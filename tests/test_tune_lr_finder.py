"""The LR range test on a regression problem: a sensible suggestion, early stop, state restored, a plot."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import surge
from helpers import params_of, same_params
from surge.tune import LRFinderResult


class Regression(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self.lin(x), y)
        self.log("train_loss", loss)  # dropped quietly: no fit is running
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)


def _loader() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 8, generator=g)
    y = x @ torch.randn(8, 1, generator=g) + 0.1 * torch.randn(512, 1, generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)


def test_suggestion_is_sensible_and_the_model_is_restored():
    torch.manual_seed(0)
    model = Regression()
    before, rng = params_of(model), torch.get_rng_state()
    result = surge.tune.lr_find(model, _loader(), min_lr=1e-6, max_lr=10.0, num_training=100)
    # SGD on this least-squares problem is stable below lr ~ 1 (momentum 0.9: ~0.2); the loss falls
    # fastest one to two decades below that.
    assert 1e-3 <= result.suggestion() <= 0.5
    assert len(result.lrs) < 100  # diverged before lr=10 and stopped
    assert result.lrs == sorted(result.lrs) and result.lrs[0] == pytest.approx(1e-6)
    assert same_params(before, params_of(model))
    assert torch.equal(torch.get_rng_state(), rng)


def test_linear_mode_and_no_early_stop():
    result = surge.tune.lr_find(
        Regression(),
        _loader(),
        min_lr=0.01,
        max_lr=0.1,
        num_training=10,
        mode="linear",
        early_stop_threshold=None,
    )
    assert len(result.lrs) == 10
    assert result.lrs[1] - result.lrs[0] == pytest.approx(0.01)


def test_plot_writes_a_png(tmp_path):
    result = LRFinderResult(
        lrs=[10 ** (-k / 10) for k in range(40, 0, -1)], losses=[1.0 / (1 + k) for k in range(40)]
    )
    path = result.plot(tmp_path / "lr.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("kwargs", "phrase"),
    [
        ({"min_lr": 0}, "min_lr"),
        ({"max_lr": -1.0}, "max_lr"),
        ({"num_training": 0}, "num_training"),
        ({"mode": "cos"}, "mode"),
    ],
)
def test_bad_arguments(kwargs, phrase):
    with pytest.raises(surge.MisconfigurationError, match=phrase):
        surge.tune.lr_find(Regression(), _loader(), **kwargs)


class KeepsItsOptimizer(Regression):
    def __init__(self) -> None:
        super().__init__()
        self.opt = torch.optim.Adam(self.parameters(), lr=0.01)

    def configure_optimizers(self):
        return self.opt


def test_an_optimizer_the_module_keeps_is_restored():
    model = KeepsItsOptimizer()
    surge.tune.lr_find(model, _loader(), num_training=5)
    assert model.opt.state == {} or all(not s for s in model.opt.state.values())
    assert model.opt.param_groups[0]["lr"] == 0.01


@pytest.mark.parametrize("tuner", ["lr_find", "find_batch_size"])
def test_a_tuner_without_data_names_train_dataloaders(tuner):
    with pytest.raises(
        surge.MisconfigurationError, match=rf"{tuner}: .*Regression defines no train_dataloader"
    ):
        getattr(surge.tune, tuner)(Regression())


def test_a_tuner_uses_the_models_own_train_dataloader():
    class WithData(Regression):
        def train_dataloader(self):
            return _loader()

    result = surge.tune.lr_find(
        WithData(), min_lr=0.01, max_lr=0.1, num_training=5, early_stop_threshold=None
    )
    assert len(result.lrs) == 5
