"""Loaders that keep their own position resume at exactly the next sample: torchdata's
StatefulDataLoader over a shuffled map-style dataset and over an IterableDataset with state (2
workers each), and a plain DataLoader over an IterableDataset with state. Saved inside the first
epoch, at its end and inside the second, resumed with the caller's RNG reseeded: the samples
trained on after the save and the final weights equal the uninterrupted run's (`torch.equal`)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, IterableDataset, TensorDataset, get_worker_info

import surge
from surge.errors import CheckpointError

stateful_dataloader = pytest.importorskip("torchdata.stateful_dataloader")
StatefulDataLoader = stateful_dataloader.StatefulDataLoader

N, BATCH = 48, 6  # 8 batches an epoch on one process
SAVES = {(0, 2): "e0-b2", (1, 2): "e1-b2"}  # (epoch, batch_idx) -> name; plus "e0-end"
DDP_KINDS = ("stateful_map", "stateful_iterable")
# On two processes, one save point each (the suite's time): the iterable's own position inside the
# epoch (what only the loader's state can restore), the map loader's state at the epoch's end.
DDP_POINTS = {"stateful_map": ("e0-end",), "stateful_iterable": ("e0-b2",)}
WORKERS: str | None = None  # how workers start (the DDP script uses a forkserver)


def _data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(N, 5, generator=g)
    return x, (x.sum(1) > 0).long(), torch.arange(N)


class Stream(IterableDataset):
    """A stream in a fixed shuffled order, split over ranks and workers; its state is where it stands.

    `yielded` counts the samples it gave in this process (with num_workers=0, what was loaded)."""

    def __init__(self, world: int = 1) -> None:
        self.x, self.y, self.i = _data()
        self.order = torch.randperm(N, generator=torch.Generator().manual_seed(4)).tolist()
        self.world, self.pos, self.yielded = world, 0, 0

    def _share(self) -> tuple[int, int]:
        info = get_worker_info()
        workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        rank = int(os.environ.get("RANK", "0"))
        return rank * workers + worker, self.world * workers

    def __iter__(self):
        part, parts = self._share()
        for k in range(self.pos, N):
            if k % parts == part:
                self.pos = k + 1
                self.yielded += 1
                i = self.order[k]
                yield self.x[i], self.y[i], self.i[i]
        self.pos = 0  # the stream ran out: the next pass starts over

    def state_dict(self) -> dict:
        return {"pos": self.pos}

    def load_state_dict(self, state: dict) -> None:
        self.pos = state["pos"]


def make_loader(kind: str, world: int = 1):
    if kind == "stateful_map":
        return StatefulDataLoader(TensorDataset(*_data()), batch_size=BATCH, shuffle=True, num_workers=2,
                                  multiprocessing_context=WORKERS)  # fmt: skip
    if kind == "stateful_iterable":
        return StatefulDataLoader(
            Stream(world), batch_size=BATCH, num_workers=2, multiprocessing_context=WORKERS
        )
    if kind == "dataset_state":
        return DataLoader(Stream(world), batch_size=BATCH)
    raise AssertionError(kind)


class Net(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 2))
        self.seen: list[list[int]] = []  # the sample indices of every batch trained on, in order

    def training_step(self, batch, batch_idx):
        x, y, i = batch
        self.seen.append(i.tolist())
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.2, momentum=0.9)


class SaveAt(surge.callbacks.Callback):
    """Checkpoints inside epochs (`SAVES`) and at the first epoch's end."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        name = SAVES.get((trainer.current_epoch, batch_idx))
        if name is not None:
            trainer.save_checkpoint(self.folder / f"{name}.ckpt")

    def on_train_epoch_end(self, trainer, module):
        if trainer.current_epoch == 0:
            trainer.save_checkpoint(self.folder / "e0-end.ckpt")


def fit(root: Path, kind: str, seed: int, ckpt=None, devices: int = 1, callbacks=(), **kw):
    surge.seed_everything(seed)
    model, loader = Net(), make_loader(kind, devices)
    trainer = surge.Trainer(default_root_dir=root, logger=False, enable_progress_bar=False, max_epochs=2,
                            enable_model_summary=False, enable_checkpointing=False, accelerator="cpu",
                            devices=devices, callbacks=list(callbacks), **kw)  # fmt: skip
    trainer.fit(model, loader, ckpt_path=ckpt)
    return model, trainer, loader


def resume_problems(root: Path, kind: str, devices: int = 1, points=("e0-b2", "e0-end", "e1-b2")) -> dict:
    """The uninterrupted run, then a resume from each of its save points: what differs, by save point."""
    full, _, _ = fit(root / "full", kind, seed=1, devices=devices, callbacks=[SaveAt(root / "saves")])
    per_epoch = len(full.seen) // 2
    report = {}
    for name in points:
        ckpt = root / "saves" / f"{name}.ckpt"
        state = torch.load(ckpt, weights_only=True)
        loop = state["loop"]
        done = state["epoch"] * per_epoch + (per_epoch if loop["epoch_done"] else loop["batches_done"])
        resumed, _, loader = fit(root / name, kind, seed=1234, ckpt=ckpt, devices=devices)
        problems = [] if len(loop.get("loader_states") or ()) == devices else ["no loader state saved"]
        if resumed.seen != full.seen[done:]:
            problems.append(f"samples after the save: {resumed.seen[:3]} != {full.seen[done : done + 3]}")
        problems += [
            n for (n, p), q in zip(full.named_parameters(), resumed.parameters()) if not torch.equal(p, q)
        ]
        if kind == "dataset_state" and loader.dataset.yielded != N // devices * 2 - done * BATCH:
            problems.append(f"loaded {loader.dataset.yielded} samples: the stream was read again")
        report[name] = problems
    return report


@pytest.mark.parametrize("kind", ["stateful_map", "stateful_iterable", "dataset_state"])
def test_resume_continues_at_the_next_sample(tmp_path, kind):
    assert resume_problems(tmp_path, kind) == {"e0-b2": [], "e0-end": [], "e1-b2": []}


class NumpyStream(Stream):
    def state_dict(self) -> dict:
        return {"pos": np.int64(self.pos), "seen": (np.float32(0.5), [1, 2])}


class OpaqueStream(Stream):
    def state_dict(self) -> dict:
        return {"pos": self.pos, "order": {frozenset({1})}}


def _stopped(root: Path, dataset: IterableDataset) -> surge.Trainer:
    surge.seed_everything(1)
    trainer = surge.Trainer(default_root_dir=root, logger=False, enable_progress_bar=False, max_steps=3,
                            enable_model_summary=False, enable_checkpointing=False)  # fmt: skip
    trainer.fit(Net(), DataLoader(dataset, batch_size=BATCH))
    return trainer


def test_the_saved_state_loads_without_running_code(tmp_path):
    _stopped(tmp_path, NumpyStream()).save_checkpoint(tmp_path / "n.ckpt")
    (state,) = torch.load(tmp_path / "n.ckpt", weights_only=True)["loop"]["loader_states"]
    assert state == {"pos": 3 * BATCH, "seen": (0.5, [1, 2])}
    assert type(state["pos"]) is int and type(state["seen"][0]) is float

    trainer = _stopped(tmp_path, OpaqueStream())
    refused = r"\['loader_states'\]\[0\]\['order'\]\[0\] is a frozenset.*OpaqueStream.state_dict\(\) put it"
    with pytest.raises(CheckpointError, match=refused):
        trainer.save_checkpoint(tmp_path / "o.ckpt")
    assert not (tmp_path / "o.ckpt").exists()


class Plain(IterableDataset):
    def __iter__(self):
        x, y, i = _data()
        return iter(zip(x, y, i))


def test_an_iterable_without_state_says_how_it_resumes(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="surge"):
        _stopped(tmp_path, Plain())
    assert "train dataset (Plain) is an IterableDataset without state_dict" in caplog.text
    assert "reads the epoch's stream again from its start" in caplog.text


def test_a_loader_without_state_cannot_resume_a_stateful_checkpoint(tmp_path):
    _stopped(tmp_path, Stream()).save_checkpoint(tmp_path / "s.ckpt")
    surge.seed_everything(1)
    trainer = surge.Trainer(default_root_dir=tmp_path, logger=False, enable_progress_bar=False, max_steps=5,
                            enable_model_summary=False, enable_checkpointing=False)  # fmt: skip
    with pytest.raises(
        CheckpointError, match=r"s.ckpt holds the position of a train loader .* \(DataLoader\) has none"
    ):
        trainer.fit(Net(), DataLoader(Plain(), batch_size=BATCH), ckpt_path=tmp_path / "s.ckpt")


@pytest.mark.slow
def test_each_rank_resumes_its_own_loader_on_ddp(tmp_path):
    import script_server

    sys.path.insert(0, str(Path(__file__).with_name("distributed")))
    from jobs import PRELOAD, clean_env

    script = Path(__file__).with_name("distributed") / "stateful_data_script.py"
    # forked from a server that imported torch and surge, as the launcher's second rank is
    proc = script_server.run(sys.executable, [str(script), str(tmp_path)], cwd=tmp_path, env=clean_env(),
                             preload=PRELOAD, timeout=240)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for rank in (0, 1):
        report = torch.load(tmp_path / f"report{rank}.pt", weights_only=True)
        assert report == {kind: dict.fromkeys(DDP_POINTS[kind], []) for kind in DDP_KINDS}, rank


class OffsetStream(Stream):
    def load_state_dict(self, state: dict) -> None:
        self.pos = state["offset"]


def test_a_saved_position_that_does_not_fit_the_loader_is_refused(tmp_path):
    _stopped(tmp_path, Stream()).save_checkpoint(tmp_path / "s.ckpt")
    trainer = surge.Trainer(default_root_dir=tmp_path, logger=False, enable_progress_bar=False, max_steps=5,
                            enable_model_summary=False, enable_checkpointing=False)  # fmt: skip
    with pytest.raises(CheckpointError, match=r"does not fit this run's OffsetStream \(KeyError: 'offset'\)"):
        trainer.fit(Net(), DataLoader(OffsetStream(), batch_size=BATCH), ckpt_path=tmp_path / "s.ckpt")
