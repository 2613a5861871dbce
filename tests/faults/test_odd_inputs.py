"""Inputs that look odd but are fine: accepted and handled like their plain forms, not crashed on."""

from __future__ import annotations

import pytest
import torch

import surge
from helpers import TinyModel, make_loaders
from surge.callbacks import ModelCheckpoint
from surge.optim.nonfinite import NonFiniteError


class ShapedLoss(TinyModel):
    """Returns the loss with shape (1,) (as `loss.reshape(1)` or `loss.unsqueeze(0)` give), NaN at `bad`."""

    def __init__(self, bad: int | None = None) -> None:
        super().__init__()
        self.bad = bad

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx).reshape(1)
        return loss * float("nan") if batch_idx == self.bad else loss


def _fit(model, tmp_path, **kwargs):
    torch.manual_seed(0)
    trainer = surge.Trainer(
        max_epochs=1, default_root_dir=tmp_path, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, **kwargs,
    )  # fmt: skip
    trainer.fit(model, make_loaders()[0])
    return trainer


@pytest.mark.parametrize("mode", ["warn", "skip", "raise", None])
def test_a_shape_1_loss_trains_like_a_scalar(tmp_path, mode):
    torch.manual_seed(1)
    shaped = ShapedLoss()
    torch.manual_seed(1)
    plain = TinyModel()
    trainer = _fit(shaped, tmp_path, on_nonfinite=mode)
    _fit(plain, tmp_path, on_nonfinite=mode)
    assert trainer.global_step == 4
    for (name, a), b in zip(shaped.state_dict().items(), plain.state_dict().values()):
        assert torch.equal(a, b), name


def test_a_nan_shape_1_loss_is_still_caught(tmp_path):
    model = ShapedLoss(bad=2)
    with pytest.raises(NonFiniteError, match="step 3"):
        _fit(model, tmp_path, on_nonfinite="raise")
    assert all(torch.isfinite(v).all() for v in model.state_dict().values())  # the NaN step never applied


def test_tilde_in_run_directories_is_the_home_directory(tmp_path, monkeypatch):
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    ckpt = ModelCheckpoint(dirpath="~/ck")
    assert ckpt.dirpath == str(home / "ck")
    trainer = surge.Trainer(
        max_steps=2, default_root_dir="~/runs", callbacks=[ckpt], enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0,
    )  # fmt: skip
    assert trainer.default_root_dir == str(home / "runs")
    trainer.fit(TinyModel(), make_loaders()[0])
    assert [p.name for p in (home / "ck").iterdir()] == ["epoch=0-step=2.ckpt"]
    assert (home / "runs" / "surge_logs" / "version_0" / "hparams.yaml").is_file()
    assert list(cwd.iterdir()) == []  # no directory literally named "~"
