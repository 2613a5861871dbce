"""The state layout of a checkpoint: named parts that build and restore it, and `ckpt_path` reading
the checkpoint it chooses once (one verified load, one `torch.load` of the file)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest
import torch

from helpers import TinyModel, fast_trainer, make_loaders, params_of, same_params
from surge.callbacks import Callback, ModelCheckpoint
from surge.rank_zero import SurgeWarning
from surge.strategies import SingleDeviceStrategy
from surge.trainer.run_state import WEIGHTS_ONLY, checkpoint_state, state_parts


class CountingStrategy(SingleDeviceStrategy):
    """The single-device strategy, recording every checkpoint it reads and verifies."""

    def __init__(self) -> None:
        super().__init__()
        self.loads: list[Path] = []

    def load_checkpoint(self, path: str | Path) -> dict:
        self.loads.append(Path(path))
        return super().load_checkpoint(path)


class ReadsAtSetup(Callback):
    """The files `torch.load` had read when the fit started (after any restore; `setup` runs before it, as in Lightning)."""

    def __init__(self, reads: list[Path]) -> None:
        self.reads = reads
        self.seen: list[Path] = []

    def on_fit_start(self, trainer, module) -> None:
        self.seen = list(self.reads)


@pytest.fixture
def torch_reads(monkeypatch) -> list[Path]:
    """Every file `torch.load` reads, in order (the real torch.load runs)."""
    reads: list[Path] = []
    real = torch.load

    def counting(f, *args, **kwargs):
        if isinstance(f, str | os.PathLike):
            reads.append(Path(f).resolve())
        return real(f, *args, **kwargs)

    monkeypatch.setattr(torch, "load", counting)
    return reads


def fitted(root: Path, strategy: SingleDeviceStrategy | None = None):
    """A 2-epoch fit that keeps the best checkpoint by val_loss and a last.ckpt."""
    train, val = make_loaders()
    ckpt = ModelCheckpoint(dirpath=root / "ckpts", monitor="val_loss", save_top_k=1, save_last=True)
    trainer = fast_trainer(
        max_epochs=2,
        default_root_dir=root,
        callbacks=[ckpt],
        enable_checkpointing=True,
        strategy=strategy or SingleDeviceStrategy(),
    )
    model = TinyModel()
    trainer.fit(model, train, val)
    return trainer, model, val


def test_every_entry_of_a_checkpoint_is_written_by_one_named_part(tmp_path):
    trainer, _, _ = fitted(tmp_path)
    parts = state_parts(trainer._run_objects())
    # the callbacks before the optimizers: they may rebuild param groups or a scheduler first
    assert list(parts) == [
        "model", "callbacks", "optimizers", "precision", "loop", "datamodule", "rng", "loggers", "goodput"
    ]  # fmt: skip
    header = {"epoch", "global_step", "surge"}
    owner: dict[str, str] = {}
    for name, part in parts.items():
        written: dict = {}
        part.save(written)
        for key in written:
            assert key not in owner, f"{key!r} is written by both {owner[key]!r} and {name!r}"
            owner[key] = name
    assert set(checkpoint_state(trainer._run_objects())) == header | set(owner)
    weights = {key for key, name in owner.items() if name in WEIGHTS_ONLY}
    assert set(checkpoint_state(trainer._run_objects(), weights_only=True)) == header | weights
    assert weights == {"state_dict", "hyper_parameters"}


@pytest.mark.parametrize("ckpt_path", ["best", "last", "auto"])
def test_validate_reads_the_checkpoint_it_chooses_once(tmp_path, torch_reads, ckpt_path):
    strategy = CountingStrategy()
    trainer, model, val = fitted(tmp_path, strategy=strategy)
    cb = trainer.checkpoint_callback
    chosen = Path(cb.best_model_path if ckpt_path == "best" else cb.last_model_path)
    strategy.loads.clear()
    torch_reads.clear()
    trainer.validate(model, val, ckpt_path=ckpt_path)
    assert strategy.loads == [chosen]
    assert torch_reads.count(chosen.resolve()) == 1, torch_reads


def test_fit_with_auto_reads_the_checkpoint_it_resumes_from_once(tmp_path, torch_reads):
    trainer, model, _ = fitted(tmp_path)
    last = Path(trainer.checkpoint_callback.last_model_path)
    damaged = tmp_path / "ckpts" / "newer.ckpt"
    damaged.write_bytes(last.read_bytes()[:-100])  # newest, but truncated: "auto" skips it
    torch_reads.clear()
    strategy, spy = CountingStrategy(), ReadsAtSetup(torch_reads)
    train, val = make_loaders()
    resumed = TinyModel()
    again = fast_trainer(max_epochs=2, default_root_dir=tmp_path, strategy=strategy, callbacks=[spy])
    with pytest.warns(SurgeWarning, match="skipping"):
        again.fit(resumed, train, val, ckpt_path="auto")
    assert strategy.loads == [damaged, last]
    assert spy.seen.count(last.resolve()) == 1 and spy.seen.count(damaged.resolve()) <= 1, spy.seen
    assert again.global_step == trainer.global_step and same_params(params_of(resumed), params_of(model))


class WithBuffer(TinyModel):
    """TinyModel plus a buffer no checkpoint of TinyModel has; loads what matches."""

    strict_loading = False

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("extra", torch.full((2,), 7.0))


def _restore_warnings(run) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    return [str(w.message) for w in caught if "strict_loading" in str(w.message)]


def test_a_resumed_fit_and_validate_restore_the_model_the_same_way(tmp_path):
    train, val = make_loaders()
    trainer = fast_trainer(max_steps=2, default_root_dir=tmp_path)
    model = TinyModel()
    trainer.fit(model, train)
    path = tmp_path / "m.ckpt"
    trainer.save_checkpoint(path)
    resumed, evaluated = WithBuffer(), WithBuffer()
    fit_says = _restore_warnings(
        lambda: fast_trainer(max_steps=2, default_root_dir=tmp_path).fit(resumed, train, ckpt_path=path)
    )
    eval_says = _restore_warnings(
        lambda: fast_trainer(default_root_dir=tmp_path).validate(evaluated, val, ckpt_path=path)
    )
    assert fit_says == eval_says and len(fit_says) == 1 and "missing keys: ['extra']" in fit_says[0]
    for restored in (resumed, evaluated):
        assert torch.equal(restored.net[0].weight, model.net[0].weight)
        assert torch.equal(restored.extra, torch.full((2,), 7.0))


def test_auto_refuses_a_checkpoint_of_another_layout_instead_of_starting_afresh(tmp_path):
    from surge.errors import CheckpointError, IncompatibleCheckpointError
    from surge.trainer.run_state import find_checkpoint

    newest = tmp_path / "newest.ckpt"
    newest.write_bytes(b"x")

    def load(path):
        raise IncompatibleCheckpointError(f"{path} was saved with pipeline_parallel=2")

    for ckpt_path in ("auto", "last", newest):
        with pytest.raises(IncompatibleCheckpointError, match="pipeline_parallel=2") as err:
            find_checkpoint(ckpt_path, load, tmp_path, None)
        assert 'ckpt_path="auto"' not in str(err.value)  # its advice is for broken files

    def broken(path):
        raise CheckpointError(f"{path} is truncated")

    with pytest.warns(SurgeWarning, match="skipping"):
        assert find_checkpoint("auto", broken, tmp_path, None) is None  # a broken one is still skipped
