"""Resume states that were tampered with (or written by something else) are refused by name.

A BackboneFinetuning state whose `params` is a string used to be read letter by letter (or failed as
a bare KeyError/ValueError); a stateful loader position claiming its iterator finished inside the
epoch used to skip the rest of that epoch silently. Each is now a CheckpointError naming the
checkpoint and the key, before any training step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import surge
from helpers import make_dataset
from surge.callbacks import BackboneFinetuning
from surge.checkpoint import load_checkpoint, save_atomic
from surge.errors import CheckpointError


class Backbone(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.head = nn.Linear(8, 2)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.head(self.backbone(x)), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(filter(lambda p: p.requires_grad, self.parameters()), lr=0.1)


def _trainer(root: Path, **kwargs: Any) -> surge.Trainer:
    return surge.Trainer(
        default_root_dir=root, accelerator="cpu", logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, **kwargs,
    )  # fmt: skip


def _tampered(path: Path, change: Any) -> Path:
    state = load_checkpoint(path)
    change(state)
    out = path.with_name("tampered.ckpt")
    save_atomic(state, out)  # a valid digest: the damage is in what it says, not in its bytes
    return out


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("finetuned")
    trainer = _trainer(root, max_epochs=2, callbacks=[BackboneFinetuning(unfreeze_backbone_at_epoch=1)])
    trainer.fit(Backbone(), DataLoader(make_dataset(16), batch_size=8))
    trainer.save_checkpoint(root / "after-unfreeze.ckpt")
    return root / "after-unfreeze.ckpt"


def _groups(state: dict) -> list:
    return state["callbacks"]["BackboneFinetuning"]["internal_optimizer_metadata"][0]


@pytest.mark.parametrize(
    ("change", "key"),
    [
        (lambda s: _groups(s)[1].update(params="backbone.0.weight"), "internal_optimizer_metadata[0][1]['params']"),
        (lambda s: _groups(s)[1].pop("params"), "internal_optimizer_metadata[0][1]['params']"),
        (lambda s: _groups(s).append("lr"), "internal_optimizer_metadata[0][2]"),
        (lambda s: s["callbacks"]["BackboneFinetuning"].update(internal_optimizer_metadata=[[]]),
         "internal_optimizer_metadata"),
        (lambda s: s["callbacks"]["BackboneFinetuning"]["trainable"].update(params="head.weight"),
         "trainable['params']"),
        (lambda s: s["callbacks"]["BackboneFinetuning"].update(epoch_started="1"), "epoch_started"),
        (lambda s: s["callbacks"]["BackboneFinetuning"].update(previous_backbone_lr="0.1"), "previous_backbone_lr"),
        (lambda s: s["callbacks"].update(BackboneFinetuning=["internal_optimizer_metadata"]),
         "no 'internal_optimizer_metadata'"),
    ],
    ids=["params-a-string", "params-missing", "group-not-a-dict", "metadata-a-list", "trainable-a-string",
         "epoch-a-string", "lr-a-string", "state-a-list"],
)  # fmt: skip
def test_a_tampered_finetuning_state_names_the_checkpoint_and_the_key(finetuned, tmp_path, change, key):
    path = _tampered(finetuned, change)
    model = Backbone()
    trainer = _trainer(tmp_path, max_epochs=3, callbacks=[BackboneFinetuning(unfreeze_backbone_at_epoch=1)])
    with pytest.raises(CheckpointError) as err:
        trainer.fit(model, DataLoader(make_dataset(16), batch_size=8), ckpt_path=path)
    text = str(err.value)
    assert str(path) in text and "callbacks['BackboneFinetuning']" in text and key in text, text
    assert "'b', 'a', 'c'" not in text  # a string's letters are never read as names
    assert trainer.global_step == 0  # refused before any step


stateful_dataloader = pytest.importorskip("torchdata.stateful_dataloader")


def _loader() -> Any:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(48, 4, generator=g)
    return stateful_dataloader.StatefulDataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=6)


class Plain(Backbone):
    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_a_loader_position_finished_inside_the_epoch_is_refused(tmp_path):
    trainer = _trainer(tmp_path, max_steps=3)  # stops inside epoch 0 (8 batches)
    trainer.fit(Plain(), _loader())
    trainer.save_checkpoint(tmp_path / "mid.ckpt")
    saved = load_checkpoint(tmp_path / "mid.ckpt")["loop"]
    assert not saved["epoch_done"] and saved["batches_done"] == 3
    path = _tampered(
        tmp_path / "mid.ckpt", lambda s: s["loop"]["loader_states"][0].update(_iterator_finished=True)
    )
    resumed = _trainer(tmp_path, max_epochs=1)
    with pytest.raises(CheckpointError) as err:
        resumed.fit(Plain(), _loader(), ckpt_path=path)
    text = str(err.value)
    assert str(path) in text and "'_iterator_finished': True" in text and "loader_states'][0]" in text
    assert "after batch 3 of epoch 0" in text and "8 batches" in text


def test_an_untampered_position_still_resumes_the_rest_of_the_epoch(tmp_path):
    trainer = _trainer(tmp_path, max_steps=3)
    trainer.fit(Plain(), _loader())
    trainer.save_checkpoint(tmp_path / "mid.ckpt")
    resumed = _trainer(tmp_path, max_epochs=1)
    resumed.fit(Plain(), _loader(), ckpt_path=tmp_path / "mid.ckpt")
    assert resumed.global_step == 8
