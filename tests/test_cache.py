"""surge.data.cache: round trip, fingerprint checks, no __getitem__ on reopen, atomic builds."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import surge
from surge.data.cached import MANIFEST, CacheMismatchError


class Expensive(Dataset):
    """Samples of mixed dtypes; counts its __getitem__ calls (in this process)."""

    def __init__(self, n: int = 12, offset: float = 0.0) -> None:
        self.n, self.offset, self.calls = n, offset, 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        self.calls += 1
        g = torch.Generator().manual_seed(i)
        image = torch.randn(3, 4, 4, generator=g) + self.offset
        return {
            "image": image,
            "label": i % 3,
            "mask": np.arange(4) > i % 4,
            "half": image[0].to(torch.bfloat16),
        }


def _same(a, b) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(torch.as_tensor(a[k]), b[k]) and torch.as_tensor(a[k]).dtype == b[k].dtype for k in a
    )


def test_round_trip(tmp_path):
    data = Expensive()
    cached = surge.data.cache(data, tmp_path / "c", num_workers=2, progress=False)  # built in workers
    assert len(cached) == len(data)
    for i in range(len(data)):
        assert _same(data[i], cached[i])
    batch = next(iter(DataLoader(cached, batch_size=4, num_workers=2)))
    assert batch["image"].shape == (4, 3, 4, 4) and batch["label"].tolist() == [0, 1, 2, 0]


def test_tuples_and_plain_tensors(tmp_path):
    pairs = [(torch.full((2,), float(i)), torch.tensor(i)) for i in range(5)]
    cached = surge.data.cache(pairs, tmp_path / "t", num_workers=0, progress=False)
    assert all(torch.equal(cached[i][0], pairs[i][0]) and isinstance(cached[i], tuple) for i in range(5))
    tensors = [torch.arange(3) * i for i in range(4)]
    assert torch.equal(
        surge.data.cache(tensors, tmp_path / "p", num_workers=0, progress=False)[3], tensors[3]
    )


def test_second_open_never_calls_getitem(tmp_path):
    data = Expensive()
    surge.data.cache(data, tmp_path / "c", num_workers=0, progress=False)
    assert data.calls == len(data)  # built once, in this process
    data.calls = 0
    again = surge.data.cache(data, tmp_path / "c", num_workers=0, progress=False)
    _ = [again[i] for i in range(len(again))]
    assert data.calls == 0


def test_mismatch_rebuilds_or_refuses(tmp_path):
    path = tmp_path / "c"
    surge.data.cache(Expensive(n=12), path, num_workers=0, progress=False)
    with pytest.raises(CacheMismatchError, match=r"length 12 vs the dataset's 8") as err:
        surge.data.cache(Expensive(n=8), path, rebuild=False, progress=False)
    assert str(path) in str(err.value)
    with pytest.raises(CacheMismatchError, match="fingerprint"):
        surge.data.cache(Expensive(n=12), path, key="v2", rebuild=False, progress=False)
    rebuilt = surge.data.cache(Expensive(n=8), path, num_workers=0, progress=False)
    assert len(rebuilt) == 8 and json.loads((path / MANIFEST).read_text())["length"] == 8
    assert [p.name for p in tmp_path.iterdir()] == ["c"]  # no temporary or old directory left


def test_verify_recomputes_samples(tmp_path):
    path = tmp_path / "c"
    surge.data.cache(Expensive(), path, num_workers=0, progress=False)
    changed = Expensive(offset=1.0)  # same class, length and key: only the values differ
    assert surge.data.cache(changed, path, rebuild=False, progress=False) is not None
    with pytest.raises(CacheMismatchError, match="recomputed samples differ"):
        surge.data.cache(changed, path, rebuild=False, verify=True, progress=False)


def test_a_killed_build_is_never_taken_as_a_cache(tmp_path):
    class Fails(Expensive):
        def __getitem__(self, i):
            if i == 7:
                raise KeyboardInterrupt  # as if the build were stopped halfway
            return super().__getitem__(i)

    with pytest.raises(KeyboardInterrupt):
        surge.data.cache(Fails(), tmp_path / "c", num_workers=0, progress=False)
    assert list(tmp_path.iterdir()) == []
    # A directory left by a process that died (no cleanup ran) is removed by the next build.
    (tmp_path / ".c.tmp-999999999-abcd").mkdir()
    surge.data.cache(Expensive(), tmp_path / "c", num_workers=0, progress=False)
    assert [p.name for p in tmp_path.iterdir()] == ["c"]


def test_samples_of_varying_shape_are_refused(tmp_path):
    ragged = [torch.zeros(i + 1) for i in range(3)]
    with pytest.raises(surge.MisconfigurationError, match="fixed structure"):
        surge.data.cache(ragged, tmp_path / "r", num_workers=0, progress=False)
    assert list(tmp_path.iterdir()) == []
