"""A callback's saved state is found again under the keys surge wrote before it took Lightning's, and
a saved state no callback of the run takes back is named, never dropped without a word."""

from __future__ import annotations

import pytest
import torch

from helpers import TinyModel, fast_trainer, make_loaders
from surge.callbacks import EarlyStopping, ModelCheckpoint
from surge.checkpoint import load_checkpoint, save_atomic
from surge.rank_zero import SurgeWarning


def _fit(tmp_path, callbacks, **kw):
    train, val = make_loaders()
    trainer = fast_trainer(
        default_root_dir=tmp_path, enable_checkpointing=True, max_epochs=2, callbacks=callbacks, **kw
    )
    trainer.fit(TinyModel(), train, val)
    return trainer


def _rekeyed(path, rename):
    state = load_checkpoint(path)
    state["callbacks"] = {rename.get(k, k): v for k, v in state["callbacks"].items()}
    out = path.with_name("old.ckpt")
    save_atomic(state, out)
    return out


def test_a_checkpoint_with_surge_0_1_keys_restores_modelcheckpoint_and_earlystopping(tmp_path):
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ck", monitor="val_loss", save_last=True)
    stop = EarlyStopping(monitor="val_loss", patience=5)
    _fit(tmp_path, [ckpt, stop])
    old_keys = {
        ckpt.state_key: "ModelCheckpoint{monitor='val_loss', mode='min', every_n_train_steps=0, every_n_epochs=1}",
        stop.state_key: "EarlyStopping{monitor='val_loss', mode='min'}",
    }
    old = _rekeyed(tmp_path / "ck" / "last.ckpt", old_keys)
    ckpt2 = ModelCheckpoint(dirpath=tmp_path / "ck", monitor="val_loss", save_last=True)
    stop2 = EarlyStopping(monitor="val_loss", patience=5)
    train, val = make_loaders()
    trainer = fast_trainer(
        default_root_dir=tmp_path, enable_checkpointing=True, max_epochs=2, callbacks=[ckpt2, stop2]
    )
    trainer.fit(TinyModel(), train, val, ckpt_path=old)  # nothing left to train: the states as restored
    assert ckpt2.best_model_path == ckpt.best_model_path
    assert torch.equal(ckpt2.best_model_score, ckpt.best_model_score)
    assert torch.equal(stop2.best_score, stop.best_score) and stop2.wait_count == stop.wait_count


def test_a_saved_state_no_callback_takes_back_is_named(tmp_path):
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ck", monitor="val_loss", save_last=True)
    _fit(tmp_path, [ckpt, EarlyStopping(monitor="val_loss", patience=5)])
    train, val = make_loaders()
    trainer = fast_trainer(default_root_dir=tmp_path, max_epochs=3)
    with pytest.warns(SurgeWarning, match="EarlyStopping.*not have|not have.*EarlyStopping"):
        trainer.fit(TinyModel(), train, val, ckpt_path=tmp_path / "ck" / "last.ckpt")
