"""A full disk while saving: a clear error, the last good checkpoint intact, training state untouched."""

from __future__ import annotations

import contextlib

import pytest
import torch

import surge
from helpers import TinyModel, fast_trainer, make_loaders, small_filesystem
from surge.checkpoint import load_checkpoint
from surge.errors import CheckpointError


class Wide(TinyModel):
    def __init__(self) -> None:
        super().__init__(hidden=2048)  # ~10k parameters per checkpoint: two files fit in 256k, three do not


def test_a_full_disk_keeps_the_last_good_checkpoint(tmp_path):
    with small_filesystem(tmp_path / "disk", "256k") as disk:
        trainer = fast_trainer(max_steps=2, default_root_dir=tmp_path)
        model = Wide()
        trainer.fit(model, make_loaders()[0])
        good = disk / "good.ckpt"
        trainer.save_checkpoint(good)
        weights = {k: v.clone() for k, v in model.state_dict().items()}
        filler = disk / "filler"
        with open(filler, "wb") as f, contextlib.suppress(OSError):  # leave less room than a checkpoint needs
            f.write(b"\0" * (256 * 1024 - good.stat().st_size - 8 * 1024))
        with pytest.raises(
            CheckpointError, match=r"could not write checkpoint .*good\.ckpt.*No space left.*intact"
        ):
            trainer.save_checkpoint(good)
        assert load_checkpoint(good)["global_step"] == 2  # the previous file is whole
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "good.ckpt"]  # no temporary left
        for key, value in model.state_dict().items():
            assert torch.equal(value, weights[key])
        filler.unlink()
        trainer.save_checkpoint(disk / "after.ckpt")  # space again: saving works again
        assert load_checkpoint(disk / "after.ckpt")["global_step"] == 2
        assert isinstance(trainer, surge.Trainer)
