"""The checkpoint digest is a format: the same state gives the same digest as the surge that wrote
older files (pinned here by value), whatever shortcuts its computation takes."""

from __future__ import annotations

import collections
import enum

import torch

from surge.checkpoint import _digest_record, content_digest, load_checkpoint, save_atomic


class Color(enum.IntEnum):
    RED = 1


def _states() -> dict[str, dict]:
    g = torch.Generator().manual_seed(0)
    base = torch.randn(4, 6, generator=g)
    param = torch.nn.Parameter(torch.randn(3, 2, generator=g))
    plain = {
        "a": 1, "b": 2.5, "c": "x", "d": None, "e": True, 3: [1, (2, 3)], "f": {1, 2}, "g": frozenset({"z"}),
        "h": b"by", "i": Color.RED, "j": complex(1, 2), "k": torch.float16, "l": torch.device("cpu"),
    }  # fmt: skip
    tensors = {
        "contig": base, "transposed": base.t(), "slice": base[1:, ::2], "offset": base[2],
        "scalar": torch.tensor(3.5), "empty": torch.empty(0, 3), "bool": torch.tensor([True, False]),
        "bf16": base.to(torch.bfloat16), "int": torch.arange(7),
        "complex": torch.randn(3, dtype=torch.complex64, generator=g), "param": param,
        "grad": base.clone().requires_grad_(), "expanded": torch.ones(1, 3).expand(4, 3),
        "size1": torch.randn(1, 5, generator=g).t(), "ordered": collections.OrderedDict(w=base[0]),
    }  # fmt: skip
    return {"plain": plain, "tensors": tensors}


# Computed by the digest as it was before it read tensors in place (format versions 2 and 1).
PINNED = {
    "plain": ("fd3c8705e7a849774ed38b9aec23caa1d14c3340", "eed73b7f48464bdd4446c33c6fbea73d91cf003d"),
    "tensors": ("9b8f61cc91868c453818da9e3e35badf50e2b805", "f47bf5e9f15bfecd7448b6fe42bf4c716682db65"),
}


def test_digest_of_every_kind_of_value_is_unchanged():
    for name, state in _states().items():
        assert (content_digest(state), content_digest(state, version=1)) == PINNED[name], name


def test_the_written_record_is_the_digest_of_what_loads(tmp_path):
    path = save_atomic({"w": _states()["tensors"]["transposed"], "n": 3}, tmp_path / "a.ckpt")
    state = load_checkpoint(path)
    assert _digest_record(path) == f"blake2b-160:{content_digest(state)}".encode()
