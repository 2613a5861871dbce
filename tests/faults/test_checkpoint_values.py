"""A run never writes a checkpoint it cannot read back.

surge loads checkpoints weights-only, so a value a hook adds that such a load refuses (a numpy
array, a datetime, a Path, ...) used to make every checkpoint of the run unloadable while the save
itself stayed silent. Now numpy scalars become Python numbers and anything else is refused at save
time, naming the key and the hook. The property test draws random nestings of every kind of value
a hook might add: each is either refused (and would indeed not have loaded back) or loads back equal.
"""

from __future__ import annotations

import ast
import collections
import dataclasses
import datetime
import enum
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import surge
from helpers import TinyModel, fast_trainer, make_loaders
from surge.checkpoint import load_checkpoint, save_atomic
from surge.checkpoint.values import check_state
from surge.errors import CheckpointError

HOOK = "Probe.on_save_checkpoint"
Pair = collections.namedtuple("Pair", "a b")


class Color(enum.Enum):
    RED = 1


@dataclasses.dataclass(frozen=True)
class Point:
    x: int = 1


REFUSED = (np.ndarray, datetime.datetime, datetime.date, Path, Color, Point, Pair, frozenset,
           collections.defaultdict, range, slice)  # fmt: skip

TENSORS = st.sampled_from(
    [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.uint8, torch.bool,
     torch.complex64]
).flatmap(
    lambda dtype: st.integers(0, 4).map(lambda n: (torch.arange(n * 3) % 3).reshape(n, 3).to(dtype))
)  # fmt: skip
NUMPY_SCALARS = st.one_of(
    st.floats(-1e6, 1e6).map(np.float64), st.floats(-1e3, 1e3).map(np.float32), st.integers(-100, 100).map(np.int64),
    st.integers(0, 200).map(np.uint8), st.booleans().map(np.bool_), st.text(max_size=3).map(np.str_),
    st.complex_numbers(max_magnitude=10, allow_nan=False).map(np.complex128),
)  # fmt: skip
KEYS = st.one_of(
    st.text(max_size=4), st.integers(-5, 5), st.just(None), st.tuples(st.integers(0, 3), st.text(max_size=2))
)
SAFE_LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=5), st.binary(max_size=5),
    st.complex_numbers(allow_nan=False), st.builds(bytearray, st.binary(max_size=3)), TENSORS, NUMPY_SCALARS,
    st.sampled_from([torch.Size([2, 3]), torch.float16, torch.bfloat16, torch.device("cpu"), torch.strided]),
    st.builds(lambda t: torch.nn.Parameter(t, requires_grad=False), TENSORS.filter(lambda t: t.is_floating_point())),
)  # fmt: skip
BAD_LEAVES = st.one_of(
    st.builds(np.zeros, st.integers(0, 3)), st.just(np.arange(4, dtype=np.int32)), st.just(datetime.datetime(2026, 1, 2)),
    st.just(datetime.date(2026, 1, 2)), st.just(Path("/tmp/x")), st.just(Color.RED), st.just(Point()),
    st.just(Pair(1, 2)), st.just(frozenset({1})), st.just(collections.defaultdict(int, a=1)), st.just(range(3)),
    st.just(np.datetime64("2026-01-02")), st.just(torch.eye(2).to_sparse()), st.just(slice(1, 2)),
    st.just(torch.empty(2, device="meta")),
)  # fmt: skip
HASHABLE = st.one_of(st.integers(-5, 5), st.text(max_size=3), st.just(Path("/p")), st.just(Color.RED),
                     st.just(Pair(0, 1)), st.just(datetime.date(2026, 1, 1)))  # fmt: skip


def _trees(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.lists(inner, max_size=3).map(tuple),
            st.dictionaries(KEYS, inner, max_size=3),
            st.dictionaries(st.text(max_size=3), inner, max_size=3).map(collections.OrderedDict),
            st.sets(HASHABLE, max_size=3),
        ),
        max_leaves=8,
    )


def _path_value(root: Any, where: str) -> Any:
    """The value a refusal names, e.g. `checkpoint['hook'][0][(1, 'a')]` (a set's items by iteration order)."""
    keys, node = [], ast.parse(where, mode="eval").body
    while isinstance(node, ast.Subscript):
        keys.append(ast.literal_eval(node.slice))
        node = node.value
    value = root
    for key in reversed(keys):
        value = list(value)[key] if isinstance(value, set) else value[key]
    return value


def _refused(value: Any) -> bool:
    return (
        isinstance(value, REFUSED)
        or type(value) is bytes and not value  # pickled as a call of bytes()
        or type(value).__module__ == "numpy" and isinstance(value, np.datetime64)
        or isinstance(value, torch.Tensor) and (value.layout != torch.strided or value.device.type == "meta")
    )  # fmt: skip


def _plain(value: Any) -> Any:
    """What a value must load back as: numpy scalars as Python numbers, everything else itself."""
    if isinstance(value, np.generic):
        return value.item()
    if type(value) in (dict, collections.OrderedDict):
        return type(value)((k, _plain(v)) for k, v in value.items())
    if type(value) in (list, tuple, set):
        return type(value)(_plain(v) for v in value)
    return value


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(value=_trees(st.one_of(SAFE_LEAVES, SAFE_LEAVES, BAD_LEAVES)))
def test_a_hook_value_is_refused_naming_it_or_loads_back_equal(tmp_path, value):
    state = {"epoch": 0, "hook": value}
    try:
        check_state(state, HOOK)
    except CheckpointError as err:
        message = str(err)
        assert HOOK in message and "checkpoint not written" in message
        where = re.search(r"checkpoint not written: (checkpoint\['hook'\].*?) (is a|has a key) ", message)
        assert where is not None, message
        named = _path_value({"hook": value}, where.group(1))
        if where.group(2) == "is a":
            assert _refused(named), (message, named)
        else:
            assert any(_refused(k) or type(k) is tuple and any(map(_refused, k)) for k in named), (
                message,
                named,
            )
        with pytest.raises((CheckpointError, RuntimeError, ValueError, NotImplementedError)):
            save_atomic({"epoch": 0, "hook": value}, tmp_path / "raw.ckpt")  # unchecked, it is unreadable
            load_checkpoint(tmp_path / "raw.ckpt")
        return
    path = save_atomic(state, tmp_path / "ok.ckpt")
    assert _same(load_checkpoint(path)["hook"], _plain(value))


def test_the_check_never_changes_what_a_hook_handed_in():
    mine = {"score": np.float64(0.5), "steps": [np.int64(3)]}
    state = {"hook": mine}
    check_state(state, HOOK)
    assert type(state["hook"]["score"]) is float and type(state["hook"]["steps"][0]) is int
    assert type(mine["score"]) is np.float64 and type(mine["steps"][0]) is np.int64


class Probe(TinyModel):
    def __init__(self, extra: Any = None) -> None:
        super().__init__()
        self.extra = extra

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["probe"] = {"score": np.float64(0.25), "seen": np.int64(7), "extra": self.extra}


class Stamp(surge.callbacks.Callback):
    def on_save_checkpoint(self, trainer: Any, module: Any, checkpoint: dict[str, Any]) -> None:
        checkpoint["stamp"] = datetime.datetime(2026, 12, 4)


@pytest.mark.parametrize("async_checkpoint", [False, True], ids=["sync", "async"])
def test_numpy_scalars_from_a_hook_save_and_resume(tmp_path, async_checkpoint):
    train, val = make_loaders()
    trainer = fast_trainer(max_epochs=1, async_checkpoint=async_checkpoint, default_root_dir=tmp_path)
    trainer.fit(Probe(), train, val)
    trainer.save_checkpoint(tmp_path / "a.ckpt")
    saved = load_checkpoint(tmp_path / "a.ckpt")["probe"]
    assert saved == {"score": 0.25, "seen": 7, "extra": None} and type(saved["seen"]) is int
    again = fast_trainer(max_epochs=2, default_root_dir=tmp_path)
    again.fit(Probe(), train, val, ckpt_path=tmp_path / "a.ckpt")
    assert again.current_epoch == 2


@pytest.mark.parametrize("async_checkpoint", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize(
    ("model", "callbacks", "words"),
    [(Probe(np.zeros(3)), [], "checkpoint['probe']['extra'] is a numpy.ndarray"),
     (Probe(Path("runs")), [], "checkpoint['probe']['extra'] is a pathlib.PosixPath"),
     (Probe(), [Stamp()], "checkpoint['stamp'] is a datetime.datetime")],
    ids=["ndarray", "path", "datetime-by-a-callback"],
)  # fmt: skip
def test_an_unloadable_value_is_refused_at_save_naming_key_and_hook(
    tmp_path, async_checkpoint, model, callbacks, words
):
    train, val = make_loaders()
    trainer = fast_trainer(max_epochs=1, async_checkpoint=async_checkpoint, callbacks=callbacks)
    trainer.fit(model, train, val)
    with pytest.raises(CheckpointError) as err:
        trainer.save_checkpoint(tmp_path / "b.ckpt")
    hook = "Stamp.on_save_checkpoint" if callbacks else "Probe.on_save_checkpoint"
    assert words in str(err.value) and hook in str(err.value)
    assert not list(tmp_path.glob("*.ckpt"))


def test_model_checkpoint_stops_the_fit_before_writing_an_unreadable_file(tmp_path):
    train, val = make_loaders()
    ckpt = surge.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpts", save_last=True)
    trainer = fast_trainer(max_epochs=2, enable_checkpointing=True, callbacks=[ckpt])
    with pytest.raises(CheckpointError, match=r"checkpoint\['probe'\]\['extra'\] is a numpy.ndarray"):
        trainer.fit(Probe(np.ones(2)), train, val)
    assert not list(tmp_path.rglob("*.ckpt"))


def test_the_sharded_fsdp_path_applies_the_same_check(tmp_path):
    train, val = make_loaders()
    trainer = fast_trainer(max_epochs=1, strategy="fsdp", devices=1, accelerator="cpu")
    trainer.fit(Probe(np.zeros(2)), train, val)
    with pytest.raises(
        CheckpointError, match=r"checkpoint\['probe'\]\['extra'\] is a numpy.ndarray.*Probe.on_save"
    ):
        trainer.save_checkpoint(tmp_path / "c.ckpt")
    assert not list(tmp_path.iterdir())
    fine = fast_trainer(max_epochs=1, strategy="fsdp", devices=1, accelerator="cpu")
    fine.fit(Probe(), train, val)
    fine.save_checkpoint(tmp_path / "d.ckpt")
    assert load_checkpoint(tmp_path / "d.ckpt")["probe"] == {"score": 0.25, "seen": 7, "extra": None}
