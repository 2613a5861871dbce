"""`Trainer(async_checkpoint=True)`: the same files as the synchronous path, written while training goes on."""

from __future__ import annotations

import shutil
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import surge
from helpers import (
    TinyModel,
    fast_trainer,
    make_dataset,
    make_loaders,
    params_of,
    same_params,
    small_filesystem,
)
from surge.callbacks import Callback, ModelCheckpoint
from surge.checkpoint import load_checkpoint, save_atomic
from surge.checkpoint.writer import AsyncCheckpointWriter, snapshot_state
from surge.errors import CheckpointError


def _loader() -> DataLoader:
    return DataLoader(
        make_dataset(32), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(3)
    )


def _trainer(root: Path, asynchronous: bool, write: Any = None, **kwargs: Any) -> surge.Trainer:
    ckpt = ModelCheckpoint(dirpath=root / "ckpt", every_n_train_steps=1, save_top_k=-1, save_last=True)
    kwargs = {"max_epochs": 2, "enable_checkpointing": True, "callbacks": [ckpt], **kwargs}
    trainer = fast_trainer(default_root_dir=root, async_checkpoint=asynchronous, **kwargs)
    if write is not None:
        trainer.strategy.use_checkpoint_writer(AsyncCheckpointWriter(write))
    return trainer


def _fit(root: Path, asynchronous: bool, **kwargs: Any) -> TinyModel:
    ckpt_path = kwargs.pop("ckpt_path", None)
    surge.seed_everything(kwargs.pop("seed", 0))
    model = TinyModel(scheduler="step_step")
    _trainer(root, asynchronous, **kwargs).fit(model, _loader(), ckpt_path=ckpt_path)
    return model


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(_equal, a, b))
    return a == b


def test_async_files_equal_the_synchronous_ones(tmp_path):
    run = tmp_path / "run"
    _fit(run, asynchronous=False)
    shutil.move(run, tmp_path / "sync")
    _fit(run, asynchronous=True)
    names = sorted(p.name for p in (run / "ckpt").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "sync" / "ckpt").iterdir())
    assert len(names) == 9 and "last.ckpt" in names  # every step's, and last
    for name in names:
        written = load_checkpoint(run / "ckpt" / name)  # digest verified
        synchronous = load_checkpoint(tmp_path / "sync" / "ckpt" / name)
        # the goodput entry holds wall-clock seconds, which no two runs share (tests/test_goodput.py)
        assert (
            written["surge"].pop("goodput")["seconds"].keys()
            == synchronous["surge"].pop("goodput")["seconds"].keys()
        )
        assert _equal(written, synchronous), name
        assert torch.load(run / "ckpt" / name, weights_only=True)["global_step"] == written["global_step"]


class _SaveAtStepOne(Callback):
    """Saves at step 1, then counts the steps done while that write is still running and opens the
    gate the write waits at after five of them."""

    def __init__(self, path: Path, gate: threading.Event) -> None:
        self.path, self.gate, self.during = path, gate, 0
        self.saved: dict[str, torch.Tensor] = {}

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == 1:
            self.saved = params_of(module)
            trainer.save_checkpoint(self.path)
        elif trainer.strategy.checkpoint_writer.pending:
            self.during += 1
            if self.during == 5:
                self.gate.set()


def test_training_goes_on_while_a_slow_write_runs(tmp_path):
    gate, opened = threading.Event(), []

    def slow_write(state: dict[str, Any], path: Path) -> Path:
        opened.append(gate.wait(timeout=60))  # a filesystem that takes until five more steps are done
        return save_atomic(state, path)

    saver = _SaveAtStepOne(tmp_path / "one.ckpt", gate)
    trainer = fast_trainer(max_epochs=3, async_checkpoint=True, callbacks=[saver], default_root_dir=tmp_path)
    trainer.strategy.use_checkpoint_writer(AsyncCheckpointWriter(slow_write))
    model = TinyModel()
    trainer.fit(model, make_loaders()[0])
    assert opened == [True] and saver.during >= 5  # five steps while the file was being written
    saved = load_checkpoint(tmp_path / "one.ckpt")
    assert saved["global_step"] == 1
    assert same_params(saved["state_dict"], saver.saved)  # the snapshot, not the weights training moved on to
    assert not same_params(saved["state_dict"], params_of(model))


def test_old_checkpoints_are_deleted_only_after_the_new_one_is_durable(tmp_path):
    seen: list[tuple[str, list[str]]] = []

    def slow_write(state: dict[str, Any], path: Path) -> Path:
        time.sleep(0.2)  # training runs ahead meanwhile; the deletion must not
        seen.append((path.name, sorted(p.name for p in path.parent.glob("*.ckpt"))))
        return save_atomic(state, path)

    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=2, save_top_k=1)
    trainer = fast_trainer(
        max_epochs=2, enable_checkpointing=True, callbacks=[ckpt], default_root_dir=tmp_path
    )
    trainer.strategy.use_checkpoint_writer(AsyncCheckpointWriter(slow_write))
    trainer.fit(TinyModel(), make_loaders()[0])
    assert [name for name, _ in seen] == [f"epoch={s // 5}-step={s}.ckpt" for s in (2, 4, 6, 8)]
    for (previous, _), (_, present) in zip(seen, seen[1:], strict=False):
        assert previous in present  # still there while its successor is written
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["epoch=1-step=8.ckpt"]


class _Wide(TinyModel):
    def __init__(self) -> None:
        super().__init__(hidden=2048)  # two checkpoints fit in 256k, three do not


def test_a_background_write_error_is_raised_in_the_training_thread(tmp_path):
    with small_filesystem(tmp_path / "disk", "256k") as disk:
        ckpt = ModelCheckpoint(dirpath=disk, every_n_train_steps=1, save_top_k=-1)
        trainer = fast_trainer(
            max_epochs=5, enable_checkpointing=True, callbacks=[ckpt], async_checkpoint=True,
            default_root_dir=tmp_path,
        )  # fmt: skip
        with pytest.raises(CheckpointError, match=r"could not write checkpoint .*No space left.*intact"):
            trainer.fit(_Wide(), make_loaders()[0])
        assert trainer.global_step < 20  # raised during training, not only at its end
        files = sorted(disk.iterdir())
        assert files and all(p.suffix == ".ckpt" for p in files)  # no temporary left
        for path in files:
            assert load_checkpoint(path)["global_step"] >= 1


class _FailsAtStep(TinyModel):
    def training_step(self, batch, batch_idx):
        if self.trainer.global_step == 3:
            raise RuntimeError("boom at step 3")
        return super().training_step(batch, batch_idx)


def test_an_error_leaving_fit_waits_for_the_pending_write(tmp_path):
    def slow_write(state: dict[str, Any], path: Path) -> Path:
        time.sleep(0.3)
        return save_atomic(state, path)

    trainer = _trainer(tmp_path, asynchronous=True, write=slow_write)
    with pytest.raises(RuntimeError, match="boom at step 3"):
        trainer.fit(_FailsAtStep(), make_loaders()[0])
    assert load_checkpoint(tmp_path / "ckpt" / "last.ckpt")["global_step"] == 3  # whole when fit() raised


def test_a_resume_from_an_async_checkpoint_is_bit_exact(tmp_path):
    whole = _fit(tmp_path / "whole", asynchronous=True)
    ckpt = tmp_path / "whole/ckpt/epoch=1-step=5.ckpt"
    resumed = _fit(tmp_path / "resumed", asynchronous=True, ckpt_path=ckpt, seed=1)  # other initial weights
    assert same_params(params_of(whole), params_of(resumed))


def test_trainer_save_checkpoint_after_fit_waits_for_its_file(tmp_path):
    trainer = _trainer(tmp_path, asynchronous=True, max_epochs=1)
    trainer.fit(TinyModel(), make_loaders()[0])
    trainer.save_checkpoint(tmp_path / "after.ckpt")
    assert not trainer.strategy.checkpoint_writer.pending
    assert load_checkpoint(tmp_path / "after.ckpt")["global_step"] == 4


def test_a_snapshot_keeps_what_torch_save_would_write():
    weight = torch.nn.Parameter(torch.arange(6.0).reshape(2, 3))
    tied = OrderedDict(a=weight, b=weight)
    tied._metadata = {"": {"version": 1}}  # type: ignore[attr-defined]  # as nn.Module.state_dict() sets
    state = {"model": tied, "step": [1, (2, "x")], "t": torch.ones(3).t()}
    snap = snapshot_state(state)
    weight.data.add_(1)  # training moves on
    assert torch.equal(snap["model"]["a"], torch.arange(6.0).reshape(2, 3))
    assert snap["model"]["a"] is snap["model"]["b"]  # still tied, as torch.save keeps them
    assert isinstance(snap["model"], OrderedDict) and snap["model"]._metadata == tied._metadata
    assert isinstance(snap["model"]["a"], torch.nn.Parameter) and snap["model"]["a"].requires_grad
    assert snap["step"] == [1, (2, "x")]
