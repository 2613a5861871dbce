"""Hyper-parameters that are classes or objects: stored as their repr (a weights-only load reads
the file) and pickled beside; `load_from_checkpoint(weights_only=False)` makes them again, the
default refuses a model it cannot build from a repr, naming them and the remedy. And a second
`save_hyperparameters()` adds to the first, as Lightning's."""

from __future__ import annotations

import pytest
import torch

from helpers import TinyModel, fast_trainer, make_loaders
from surge.errors import CheckpointError


class WithActivation(TinyModel):
    def __init__(self, activation=torch.nn.ReLU, width: int = 4):
        super().__init__()
        self.save_hyperparameters()
        self.act = activation()


@pytest.fixture
def saved(tmp_path):
    trainer = fast_trainer(max_steps=1)
    trainer.fit(WithActivation(activation=torch.nn.Tanh, width=6), *make_loaders())
    path = tmp_path / "model.ckpt"
    trainer.save_checkpoint(path)
    return path


def test_the_file_stays_weights_only_and_the_class_comes_back_when_trusted(saved):
    state = torch.load(saved, weights_only=True)  # no code runs to read it
    assert state["hyper_parameters"]["activation"] == repr(torch.nn.Tanh)
    assert state["surge"]["hyper_parameters_objects"]["keys"] == ["activation"]
    model = WithActivation.load_from_checkpoint(saved, weights_only=False)
    assert model.hparams.activation is torch.nn.Tanh and isinstance(model.act, torch.nn.Tanh)
    assert model.hparams.width == 6


def test_the_default_load_names_the_hyper_parameter_and_the_remedy(saved):
    with pytest.raises(
        CheckpointError, match=r"\['activation'\].*weights_only=False.*only for a file you trust"
    ):
        WithActivation.load_from_checkpoint(saved)
    model = WithActivation.load_from_checkpoint(saved, activation=torch.nn.GELU)  # or pass it
    assert isinstance(model.act, torch.nn.GELU)
    with pytest.raises(ValueError, match="weights_only"):
        WithActivation.load_from_checkpoint(saved, weights_only="no")


def test_a_second_save_hyperparameters_adds_to_the_first():
    class Child(WithActivation):
        def __init__(self, depth: int = 2):
            super().__init__(width=9)
            self.save_hyperparameters(ignore="width_unused")

    hparams = Child(depth=3).hparams  # TinyModel's call, its parent's and its own, merged
    assert {k: hparams[k] for k in ("activation", "width", "depth", "in_dim")} == {
        "activation": torch.nn.ReLU,
        "width": 9,
        "depth": 3,
        "in_dim": 4,
    }
