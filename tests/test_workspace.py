"""What a run leaves in its folders: a stage that saves no checkpoint makes no checkpoint folder."""

from __future__ import annotations

from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

import surge
from helpers import TinyModel


class Predicting(TinyModel):
    def predict_step(self, batch, batch_idx):
        return self(batch[0])


def _loader() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(
        TensorDataset(torch.randn(16, 4, generator=g), torch.randint(0, 2, (16,), generator=g)), batch_size=8
    )


def test_validate_test_and_predict_make_no_checkpoint_folder(tmp_path):
    kw = dict(default_root_dir=tmp_path, enable_progress_bar=False, enable_model_summary=False)
    surge.Trainer(**kw).validate(Predicting(), _loader())
    surge.Trainer(**kw).test(Predicting(), _loader())
    surge.Trainer(**kw).predict(Predicting(), _loader())
    runs = sorted(p.name for p in (tmp_path / "surge_logs").iterdir())
    assert runs == [
        "version_0",
        "version_1",
        "version_2",
    ]  # each stage logs into its own version, as Lightning's
    assert not list(tmp_path.rglob("checkpoints")), sorted(
        str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")
    )


def test_a_fit_then_test_keeps_one_checkpoint_folder_with_the_fits_files(tmp_path):
    trainer = surge.Trainer(
        max_epochs=1, default_root_dir=tmp_path, enable_progress_bar=False, enable_model_summary=False
    )
    trainer.fit(Predicting(), _loader())
    trainer.test(ckpt_path="best", dataloaders=_loader())
    folders = list(tmp_path.rglob("checkpoints"))
    assert [p.name for p in Path(folders[0]).iterdir()] == ["epoch=0-step=2.ckpt"] and len(folders) == 1
