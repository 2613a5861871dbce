"""Resume is exact with the loaders users write: their own generators, a weighted sampler, a sampler
that draws from python's `random`, random augmentation inside worker processes, an IterableDataset
without a length. Stopped inside an epoch and at an epoch's end, resumed with the caller's RNG
reseeded, the final weights equal the uninterrupted run's (`torch.equal`)."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import (
    DataLoader,
    Dataset,
    IterableDataset,
    Sampler,
    TensorDataset,
    WeightedRandomSampler,
)

import surge

N, BATCH = 48, 6  # 8 batches an epoch


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(N, 5, generator=g)
    return x, (x.sum(1) > 0).long()


class Noisy(Dataset):
    """Random augmentation drawn from torch's RNG where the sample is loaded (a worker)."""

    def __init__(self) -> None:
        self.x, self.y = _data()

    def __len__(self) -> int:
        return N

    def __getitem__(self, i):
        return self.x[i] + 0.1 * torch.rand(5), self.y[i]


class PythonShuffle(Sampler[int]):
    """A sampler that shuffles with python's global `random`."""

    def __iter__(self):
        order = list(range(N))
        random.shuffle(order)
        return iter(order)

    def __len__(self) -> int:
        return N


class Stream(IterableDataset):
    """No length; each pass draws its order from torch's RNG."""

    def __init__(self) -> None:
        self.x, self.y = _data()

    def __iter__(self):
        for i in torch.randperm(N).tolist():
            yield self.x[i], self.y[i]


# How workers start (None: the platform's default, fork here). The DDP run uses a forkserver: forking a
# rank can deadlock in CPython 3.11 when a thread (the previous loader's queue feeder) is exiting at
# that moment (seen once there).
_WORKERS: str | None = None


def _loader(kind: str) -> DataLoader:
    ds = TensorDataset(*_data())
    if kind == "user_generator":
        return DataLoader(ds, batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(7))
    if kind == "weighted_sampler":
        g = torch.Generator().manual_seed(7)
        sampler = WeightedRandomSampler(torch.linspace(0.1, 1.0, N), num_samples=N, generator=g)
        return DataLoader(ds, batch_size=BATCH, sampler=sampler)
    if kind == "python_random_sampler":
        return DataLoader(ds, batch_size=BATCH, sampler=PythonShuffle())
    if kind == "worker_augmentation":
        return DataLoader(
            Noisy(), batch_size=BATCH, shuffle=True, num_workers=2, multiprocessing_context=_WORKERS
        )
    if kind == "iterable":
        return DataLoader(Stream(), batch_size=BATCH)
    if kind == "persistent_workers":
        g = torch.Generator().manual_seed(7)
        return DataLoader(
            ds,
            batch_size=BATCH,
            shuffle=True,
            generator=g,
            num_workers=2,
            persistent_workers=True,
            multiprocessing_context=_WORKERS,
        )
    raise AssertionError(kind)


class Net(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.2, momentum=0.9)


def _fit(root, kind: str, seed: int, ckpt=None, **kw) -> tuple[Net, surge.Trainer]:
    surge.seed_everything(seed)
    model = Net()
    trainer = surge.Trainer(default_root_dir=root, logger=False, enable_progress_bar=False,
                            enable_model_summary=False, **{"max_epochs": 2, **kw})  # fmt: skip
    trainer.fit(model, _loader(kind), ckpt_path=ckpt)
    return model, trainer


KINDS = [
    "user_generator",
    "weighted_sampler",
    "python_random_sampler",
    "worker_augmentation",
    "iterable",
    "persistent_workers",
]


@pytest.mark.parametrize("kind", KINDS)
def test_resume_inside_an_epoch_and_at_its_end_is_exact(tmp_path, kind):
    full, _ = _fit(tmp_path / "full", kind, seed=1, max_epochs=3)
    for stop in ({"max_steps": 11}, {"max_epochs": 1}):
        _, first = _fit(tmp_path / f"first{stop}", kind, seed=1, **stop)
        ckpt = tmp_path / f"{kind}{stop}.ckpt"
        first.save_checkpoint(ckpt)
        resumed, _ = _fit(tmp_path / f"resumed{stop}", kind, seed=1234, ckpt=ckpt, max_epochs=3)
        for p, q in zip(full.parameters(), resumed.parameters()):
            assert torch.equal(p, q), f"{kind} stopped at {stop}: max diff {(p - q).abs().max():.3g}"


def test_a_loader_built_without_the_saved_generator_is_refused(tmp_path):
    _, first = _fit(tmp_path / "first", "user_generator", seed=1, max_epochs=1)
    first.save_checkpoint(tmp_path / "g.ckpt")
    with pytest.raises(surge.errors.CheckpointError, match="1 dataloader generator"):
        _fit(tmp_path / "resumed", "python_random_sampler", seed=1, ckpt=tmp_path / "g.ckpt")


def test_random_draws_in_persistent_workers_are_named_at_save_time(tmp_path):
    surge.seed_everything(1)
    trainer = surge.Trainer(default_root_dir=tmp_path, logger=False, enable_progress_bar=False,
                            enable_model_summary=False, enable_checkpointing=False, max_steps=3)  # fmt: skip
    loader = DataLoader(
        Noisy(), batch_size=BATCH, num_workers=2, persistent_workers=True, multiprocessing_context=_WORKERS
    )
    trainer.fit(Net(), loader)
    with pytest.warns(UserWarning, match="persistent worker processes"):
        trainer.save_checkpoint(tmp_path / "p.ckpt")
