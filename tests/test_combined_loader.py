"""`surge.data.CombinedLoader`: each mode's batches, order and length, limits, its collection's
shape; a fit and an evaluation on one (each loader prepared as a single one, the per-loader
limits, the batch counts), and a resume inside an epoch that continues exactly."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import surge
from helpers import fast_trainer, params_of, same_params
from surge.data import CombinedLoader
from surge.loops.stage_data import LoaderPreparation


def ids(n: int, first: int = 0) -> DataLoader:
    return DataLoader(range(first, first + n), batch_size=2)


def seen(combined: CombinedLoader) -> list:
    return [(b if not isinstance(b, torch.Tensor) else b.tolist(), i, d) for b, i, d in _plain(combined)]


def _plain(combined: CombinedLoader):
    for batch, i, d in combined:
        if isinstance(batch, dict):
            batch = {k: None if v is None else v.tolist() for k, v in batch.items()}
        yield batch, i, d


def test_min_size_stops_with_the_shortest():
    combined = CombinedLoader({"a": ids(4), "b": ids(6, 10)}, "min_size")
    assert seen(combined) == [({"a": [0, 1], "b": [10, 11]}, 0, 0), ({"a": [2, 3], "b": [12, 13]}, 1, 0)]
    assert len(combined) == 2


def test_max_size_cycle_starts_the_shorter_over():
    combined = CombinedLoader({"a": ids(4), "b": ids(6, 10)}, "max_size_cycle")
    assert [b["a"] for b, _, _ in seen(combined)] == [[0, 1], [2, 3], [0, 1]]
    assert len(combined) == 3


def test_max_size_gives_none_for_a_loader_that_ran_out():
    combined = CombinedLoader({"a": ids(4), "b": ids(6, 10)}, "max_size")
    assert [b["a"] for b, _, _ in seen(combined)] == [[0, 1], [2, 3], None]
    assert [b["b"] for b, _, _ in seen(combined)] == [[10, 11], [12, 13], [14, 15]]


def test_sequential_reads_each_loader_whole_with_its_index():
    combined = CombinedLoader([ids(4), ids(6, 10)], "sequential")
    assert seen(combined) == [
        ([0, 1], 0, 0), ([2, 3], 1, 0), ([10, 11], 0, 1), ([12, 13], 1, 1), ([14, 15], 2, 1),
    ]  # fmt: skip
    assert len(combined) == 5


def test_limits_cap_each_loader():
    combined = CombinedLoader([ids(4), ids(6, 10)], "sequential")
    combined.limits = 1
    assert [(i, d) for _, i, d in seen(combined)] == [(0, 0), (0, 1)]
    assert len(combined) == 2
    cycle = CombinedLoader([ids(4), ids(6, 10)], "max_size_cycle")
    cycle.limits = [2, 2]
    iter(cycle)
    assert len(cycle) == 2  # a loop stops there; iterating it by hand reads on, as Lightning's
    with pytest.raises(ValueError, match="Mismatch in number of limits"):
        cycle.limits = [1]


def test_nested_collections_keep_their_shape():
    combined = CombinedLoader({"a": [ids(2), ids(2, 5)], "b": (ids(2, 9),)}, "min_size")
    batch, _, _ = next(iter(combined))
    assert batch["a"][1].tolist() == [5, 6] and isinstance(batch["b"], tuple)
    assert len(combined.flattened) == 3
    assert combined.sampler["b"][0] is combined.flattened[2].sampler


def test_misuse_is_refused():
    with pytest.raises(ValueError, match="Unsupported mode 'zip'"):
        CombinedLoader([ids(2)], "zip")
    with pytest.raises(RuntimeError, match="iter"):
        len(CombinedLoader([ids(2)]))
    with pytest.raises(ValueError, match="Mismatch in flattened length"):
        CombinedLoader([ids(2)]).flattened = []


def test_lightning_names_are_this_one():
    from surge.lightning.utilities import CombinedLoader as FromUtilities
    from surge.lightning.utilities.combined_loader import CombinedLoader as FromModule

    assert FromUtilities is FromModule is CombinedLoader


def test_each_loader_gets_its_rank_share():
    prep = LoaderPreparation(pin_memory=False, global_rank=1, world_size=2, distribute=True)
    data = TensorDataset(torch.arange(8.0))
    combined = CombinedLoader({"a": DataLoader(data, 2, shuffle=True), "b": DataLoader(data, 4)}, "max_size")
    batches = prep.train(combined, 1.0)
    samplers = [x.sampler for x in batches.combined.flattened]
    assert all(isinstance(s, DistributedSampler) and s.rank == 1 for s in samplers)
    assert [s.shuffle for s in samplers] == [True, False]
    assert len(batches) == 2 and combined.flattened[0].sampler is not samplers[0]  # the user's untouched


class Pair(surge.Module):
    """Trains on {"a": (x, y), "b": (x, y) or None}; records what each step saw."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Dropout(0.3), torch.nn.Linear(8, 1))
        self.steps: list[tuple[int, list[str]]] = []
        self.evals: list[tuple[int, int]] = []

    def training_step(self, batch, batch_idx):
        self.steps.append((batch_idx, sorted(k for k, v in batch.items() if v is not None)))
        return sum(
            F.mse_loss(self.net(x).squeeze(-1), y) for x, y in (v for v in batch.values() if v is not None)
        )

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        self.evals.append((batch_idx, dataloader_idx))
        x, y = batch
        self.log("val_loss", F.mse_loss(self.net(x).squeeze(-1), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def regression(n: int, seed: int, shuffle: bool = True, generator: bool = False) -> DataLoader:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=g)
    own = torch.Generator().manual_seed(seed) if generator else None
    return DataLoader(TensorDataset(x, x.sum(-1)), batch_size=4, shuffle=shuffle, generator=own)


def test_fit_runs_the_modes_batches_with_per_loader_limits():
    surge.seed_everything(0)
    model = Pair()
    combined = CombinedLoader({"a": regression(8, 1), "b": regression(24, 2)}, "max_size")
    trainer = fast_trainer(max_epochs=1, limit_train_batches=0.5, num_sanity_val_steps=0)
    vals = CombinedLoader([regression(8, 3, False), regression(12, 4, False)], "sequential")
    trainer.fit(model, combined, vals)
    # the limits (a: 1 of 2 batches, b: 3 of 6) give the epoch's length, the longest; up to it each
    # loader is read on, as in Lightning (the other modes' limits act the same way; sequential's per loader)
    assert model.steps == [(0, ["a", "b"]), (1, ["a", "b"]), (2, ["b"])]
    assert trainer.num_training_batches == 3 and trainer.num_val_batches == [2, 3]
    assert trainer.train_dataloader.keys() == {"a", "b"}
    assert model.evals == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 1)]
    assert set(trainer.callback_metrics) == {"val_loss/dataloader_idx_0", "val_loss/dataloader_idx_1"}


def test_validate_a_max_size_combined_loader_as_one():
    model = Pair()
    model.validation_step = lambda batch, batch_idx: model.log("n", float(len(batch)))  # type: ignore[method-assign]
    trainer = fast_trainer()
    combined = CombinedLoader([regression(8, 3, False), regression(12, 4, False)], "max_size")
    results = trainer.validate(model, combined, verbose=False)
    assert results == [{"n": 2.0}] and trainer.num_val_batches == [2, 3]
    assert isinstance(trainer.val_dataloaders, list) and len(trainer.val_dataloaders) == 2


def test_tuners_that_choose_for_one_loader_are_refused():
    combined = CombinedLoader([regression(8, 1), regression(8, 2)], "min_size")
    with pytest.raises(surge.MisconfigurationError, match='num_workers="auto" tunes one train DataLoader'):
        fast_trainer(num_workers="auto").fit(Pair(), combined)


def _fit(tmp_path, mode: str, generator: bool, **kwargs) -> tuple[Pair, surge.Trainer]:
    surge.seed_everything(5)
    model = Pair()
    combined = CombinedLoader({"a": regression(12, 1, generator=generator), "b": regression(28, 2)}, mode)
    trainer = fast_trainer(max_epochs=2, default_root_dir=tmp_path, **kwargs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, combined)
        if kwargs.get("max_steps"):
            trainer.save_checkpoint(tmp_path / "mid.ckpt")
    trainer.caught = [str(w.message) for w in caught]  # type: ignore[attr-defined]
    return model, trainer


@pytest.mark.parametrize(
    ("mode", "generator", "stop"), [("min_size", False, 4), ("max_size_cycle", True, 11)]
)  # epoch 2's batch 1 of 3; its batch 4 of 7 (loader a started over at 3)
def test_a_resume_inside_an_epoch_continues_exactly(tmp_path, mode, generator, stop):
    whole, _ = _fit(tmp_path / "whole", mode, generator)
    _, stopped = _fit(tmp_path / "part", mode, generator, max_steps=stop)
    assert not any("will not resume exactly" in w for w in stopped.caught)  # type: ignore[attr-defined]
    surge.seed_everything(99)  # the checkpoint's random state counts, not this one
    resumed = Pair()
    combined = CombinedLoader({"a": regression(12, 1, generator=generator), "b": regression(28, 2)}, mode)
    fast_trainer(max_epochs=2).fit(resumed, combined, ckpt_path=tmp_path / "part" / "mid.ckpt")
    assert same_params(params_of(resumed), params_of(whole))


def test_a_cycled_loader_shuffled_by_the_global_rng_says_it_resumes_inexactly(tmp_path):
    _, stopped = _fit(tmp_path, "max_size_cycle", generator=False, max_steps=3)
    assert any("loader 0 starts over inside the epoch" in w for w in stopped.caught)  # type: ignore[attr-defined]


def test_a_dict_of_val_loaders_runs_each_with_its_index():
    surge.seed_everything(0)
    model = Pair()
    vals = {"small": regression(8, 3, False), "big": regression(12, 4, False)}
    trainer = fast_trainer(max_epochs=1, num_sanity_val_steps=0, num_workers=0)
    trainer.fit(model, {"a": regression(8, 1)}, vals)  # a dict of one train loader: batches are dicts
    assert model.steps == [(0, ["a"]), (1, ["a"])]
    assert model.evals == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 1)]
    assert trainer.val_dataloaders.keys() == {"small", "big"} and trainer.num_val_batches == [2, 3]
