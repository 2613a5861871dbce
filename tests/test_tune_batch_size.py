"""The batch-size finder: the known largest batch under a memory budget, OOM recovery, state restored."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import surge
from helpers import TinyModel, fast_trainer, make_dataset, params_of, same_params
from surge.tune.batch_size import search
from surge.tune.memory import measure_peak

MiB = 2**20


class KnownMemory(surge.Module):
    """Each step keeps 1 MiB per sample alive until its backward: peak ~ batch * 1 MiB."""

    def __init__(self, oom_above: int | None = None) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(4))
        self.oom_above = oom_above

    def training_step(self, batch, batch_idx):
        (x,) = batch
        if self.oom_above is not None and len(x) > self.oom_above:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")
        held = torch.ones(len(x), MiB // 4)
        return (x * self.w).sum() + held.sum() * 0

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _loader(n: int = 100, batch_size: int = 4) -> DataLoader:
    return DataLoader(TensorDataset(torch.randn(n, 4)), batch_size=batch_size, shuffle=True)


def test_cpu_peak_is_the_allocators_count():
    def work():
        x = torch.empty(1000, 250)  # 1,000,000 bytes
        y = x * 2  # another 1,000,000 while both live
        del y

    peak = measure_peak(work, torch.device("cpu"))
    assert 2_000_000 <= peak < 2_000_100  # plus the scalar 2 as a tensor


@pytest.mark.parametrize(("budget_mib", "expected"), [(20.5, 20), (7.5, 7), (64.5, 64)])
def test_largest_batch_under_a_budget(budget_mib, expected):
    # batch b needs b MiB plus well under 0.5 MiB of small tensors, so b fits iff b <= budget - 0.5.
    found = surge.tune.find_batch_size(
        KnownMemory(), train_dataloaders=_loader(), max_memory=int(budget_mib * MiB)
    )
    assert found == expected


def test_out_of_memory_is_caught_and_the_search_goes_on():
    model = KnownMemory(oom_above=13)
    trainer = fast_trainer()
    found = surge.tune.find_batch_size(model, _loader(), trainer=trainer, max_memory=2**40, init=4)
    assert found == 13


def test_capped_by_the_dataset_and_max_batch_size():
    assert surge.tune.find_batch_size(KnownMemory(), _loader(n=10), max_memory=2**40) == 10
    assert surge.tune.find_batch_size(KnownMemory(), _loader(), max_memory=2**40, max_batch_size=37) == 37


def test_nothing_fits_is_an_error():
    with pytest.raises(surge.SurgeRuntimeError, match="not even a batch of 1"):
        surge.tune.find_batch_size(KnownMemory(), _loader(), max_memory=MiB // 2)


def test_model_optimizer_and_rng_are_restored():
    torch.manual_seed(3)
    model = TinyModel(lr=0.5)
    model.net[0].weight.grad = torch.full_like(model.net[0].weight, 0.25)
    model.eval()
    before, grad = params_of(model), model.net[0].weight.grad.clone()
    rng = torch.get_rng_state()
    loader = DataLoader(make_dataset(64), batch_size=4, shuffle=True)
    surge.tune.find_batch_size(model, loader, max_memory=2**30, max_trials=4)
    assert same_params(before, params_of(model))
    assert torch.equal(model.net[0].weight.grad, grad)
    assert not model.training and not model.net[0].training
    assert torch.equal(torch.get_rng_state(), rng)


def test_search_finds_the_boundary_of_any_monotone_predicate():
    for limit in (1, 2, 3, 17, 64, 99, 100):
        calls: list[int] = []
        found = search(
            lambda b, lim=limit, seen=calls: seen.append(b) or b <= lim, init=2, cap=100, max_trials=25
        )
        assert found == limit, (limit, calls)
        assert len(calls) <= 15
    assert search(lambda b: False, init=2, cap=100, max_trials=25) == 0


@pytest.mark.parametrize(
    ("kwargs", "phrase"),
    [({"init": 0}, "init=0"), ({"max_trials": -1}, "max_trials"), ({"max_memory": 1.5}, "max_memory")],
)
def test_bad_arguments(kwargs, phrase):
    with pytest.raises(surge.MisconfigurationError, match=phrase):
        surge.tune.find_batch_size(KnownMemory(), _loader(), **kwargs)
