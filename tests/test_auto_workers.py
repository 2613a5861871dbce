"""`num_workers="auto"` decides while training: the batches it times are trained on, in order, and a
fit that switches trains exactly what the fixed count it chose trains (behaviour, not timings)."""

from __future__ import annotations

import time

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

import surge
from surge.tune.auto_workers import Probe


class Sleepy(Dataset):
    """`ms` per sample, sleeping (workers overlap even on a busy machine); `worker_ms` in a worker."""

    def __init__(self, n: int, ms: float = 1.0, worker_ms: float | None = None) -> None:
        self.n, self.ms, self.worker_ms = n, ms, worker_ms

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        in_worker = get_worker_info() is not None and self.worker_ms is not None
        ms = self.worker_ms if in_worker else self.ms
        if ms:
            time.sleep(ms / 1e3)
        return torch.full((4,), float(i % 7)) / 7, torch.tensor([float(i % 3)]), torch.tensor(i)


class Recorded(surge.Module):
    """A linear model behind dropout (the global RNG matters) that records the samples it trains on."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.seen: list[int] = []

    def training_step(self, batch, batch_idx):
        x, y, index = batch
        self.seen += index.tolist()
        return torch.nn.functional.mse_loss(self.lin(torch.nn.functional.dropout(x, 0.3)), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def fit(trainer_factory, setting, dataset, epochs=2):
    torch.manual_seed(3)
    model = Recorded()
    loader = DataLoader(dataset, batch_size=8, shuffle=True)  # the global RNG shuffles
    trainer = trainer_factory(num_workers=setting, max_epochs=epochs)
    trainer.fit(model, loader)
    return model, trainer


def auto_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "num_workers='auto'" in r.getMessage()]


def test_a_switch_mid_epoch_trains_what_the_chosen_count_trains(trainer_factory, caplog):
    with caplog.at_level("INFO", logger="surge"):
        auto, trainer = fit(trainer_factory, "auto", Sleepy(240))
    lines = auto_lines(caplog)
    assert len(lines) == 1 and "switched at batch 6" in lines[0], lines
    chosen = trainer.train_dataloader.num_workers
    # On a loaded machine the check after the switch may find the workers slower and go back to the
    # main process: the order and weights must then equal num_workers=0's, having switched twice.
    assert trainer.train_dataloader.persistent_workers if chosen else "went back" in lines[0], lines
    fixed, _ = fit(trainer_factory, chosen, Sleepy(240))
    assert auto.seen == fixed.seen  # the same samples in the same order, both epochs
    for (name, a), (_, b) in zip(auto.state_dict().items(), fixed.state_dict().items()):
        assert torch.equal(a, b), name


def test_a_count_that_proves_slower_hands_loading_back(trainer_factory, caplog):
    # In-process 1 ms a sample; in a worker 12 ms: the prediction says workers, the check says no.
    with caplog.at_level("INFO", logger="surge"):
        auto, trainer = fit(trainer_factory, "auto", Sleepy(240, ms=1.0, worker_ms=12.0))
    lines = auto_lines(caplog)
    assert len(lines) == 1 and "went back to this process" in lines[0], lines
    assert trainer.train_dataloader.num_workers == 0
    fixed, _ = fit(trainer_factory, 0, Sleepy(240))
    assert auto.seen == fixed.seen
    for (name, a), (_, b) in zip(auto.state_dict().items(), fixed.state_dict().items()):
        assert torch.equal(a, b), name


class Cheap(Dataset):
    def __init__(self) -> None:
        self.x, self.y = torch.randn(4000, 4), torch.randn(4000, 1)

    def __len__(self) -> int:
        return 4000

    def __getitem__(self, i: int):
        return self.x[i], self.y[i], i


def test_cheap_loading_stays_in_process_and_says_why(trainer_factory, caplog):
    with caplog.at_level("INFO", logger="surge"):
        _, trainer = fit(trainer_factory, "auto", Cheap(), epochs=1)
    lines = auto_lines(caplog)
    assert len(lines) == 1 and "workers would save under 10%" in lines[0], lines
    assert trainer.train_dataloader.num_workers == 0


class Stream(IterableDataset):
    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, 96, step):
            time.sleep(0.002)
            yield torch.full((4,), float(i % 7)) / 7, torch.tensor([float(i % 3)]), torch.tensor(i)


def test_an_iterable_dataset_switches_at_the_next_epoch(trainer_factory, caplog):
    with caplog.at_level("INFO", logger="surge"):
        model = Recorded()
        trainer = trainer_factory(num_workers="auto", max_epochs=2)
        trainer.fit(model, DataLoader(Stream(), batch_size=8))
    lines = auto_lines(caplog)
    assert len(lines) == 1 and "used from the next epoch" in lines[0], lines
    assert model.seen[:96] == list(range(96))  # the first epoch ran in-process, in order
    assert sorted(model.seen[96:]) == list(range(96))  # the second in workers, each sample once
    assert trainer.train_dataloader.num_workers >= 1


def test_the_prediction_is_bounded_by_the_step_the_loading_and_the_cores():
    probe = Probe(fetch_s=0.020, fetch_cpu_s=0.020, step_s=0.001, step_cpu_s=0.001)
    assert probe.batch_s == 0.021
    # One worker only moves the loading; two share it, but two cores must also run the step.
    assert 0.019 < probe.predict(1, cpus=2) <= 0.021
    assert 0.010 < probe.predict(2, cpus=2) < 0.012
    assert probe.predict(4, cpus=2) == probe.predict(2, cpus=2)  # no more cores to use
    io = Probe(fetch_s=0.020, fetch_cpu_s=0.0, step_s=0.001, step_cpu_s=0.001)  # waiting, not computing
    assert io.predict(4, cpus=2) < 0.006
