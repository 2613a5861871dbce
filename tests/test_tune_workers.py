"""The num_workers finder picks workers for a slow dataset and none for a cheap one (behaviour, not timings)."""

from __future__ import annotations

import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import surge
from surge.tune import WorkersResult, measure_num_workers


class Slow(Dataset):
    """2 ms a sample. It sleeps rather than spins, so workers overlap even on a busy 2-core machine."""

    def __len__(self) -> int:
        return 400

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(0.002)
        return torch.full((4,), float(i))


class Cheap(Dataset):
    def __len__(self) -> int:
        return 20_000

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((4,), float(i))


def test_a_slow_dataset_gets_workers():
    result = measure_num_workers(DataLoader(Slow(), batch_size=8), max_workers=2, batches=8)
    assert result.num_workers >= 1
    assert set(result.throughput) == {0, 1, 2}
    assert result.speedup > 1.0


def test_a_cheap_dataset_loads_in_the_main_process():
    # Passing a batch between processes costs far more than making it here.
    assert surge.tune.find_num_workers(DataLoader(Cheap(), batch_size=8), max_workers=2, batches=20) == 0


def test_the_users_loader_and_the_rng_are_untouched():
    g = torch.Generator().manual_seed(5)
    loader = DataLoader(Cheap(), batch_size=8, shuffle=True, generator=g)
    state, rng = g.get_state(), torch.get_rng_state()
    measure_num_workers(loader, max_workers=1, batches=5)
    assert loader.num_workers == 0
    assert torch.equal(g.get_state(), state) and torch.equal(torch.get_rng_state(), rng)


def test_result_picks_the_fewest_within_tolerance():
    result = WorkersResult(num_workers=2, throughput={0: 100.0, 1: 180.0, 2: 200.0})
    assert result.speedup == pytest.approx(2.0)
    assert "num_workers=2" in result.describe()


def test_trainer_num_workers_recreates_train_and_val_loaders(trainer_factory, tiny_model, loaders):
    train, val = loaders(n_train=32, n_val=16, batch_size=8)
    trainer = trainer_factory(num_workers=1)
    trainer.fit(tiny_model(), train, val)
    assert trainer._train_loader.num_workers == 1 and trainer._train_loader.persistent_workers
    assert trainer._val_loaders[0].num_workers == 1
    assert trainer._train_loader.batch_size == 8 and train.num_workers == 0  # the user's loader is kept


def test_trainer_num_workers_auto_says_what_it_chose(trainer_factory, tiny_model, loaders, caplog):
    train, val = loaders(n_train=64, batch_size=8)
    trainer = trainer_factory(num_workers="auto")
    with caplog.at_level("INFO", logger="surge"):
        trainer.fit(tiny_model(), train, val)
    assert "num_workers='auto'" in caplog.text
    assert trainer._train_loader.num_workers == 0  # a tiny in-memory dataset
