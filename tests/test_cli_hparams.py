"""Hyper-parameters a config CLI recorded: what the loggers get (the module's and the datamodule's,
merged), and `load_from_checkpoint`'s refusal of what it would have to import or run."""

import pytest
import torch

import surge
from surge.errors import UntrustedCheckpointError
from surge.module.hparams import logged_hparams
from surge.module.instantiated import rebuilt_arguments


class Net(surge.Module):
    def __init__(self, lr: float = 0.1, activation: torch.nn.Module | None = None):
        super().__init__()
        self.save_hyperparameters()


class Data(surge.DataModule):
    def __init__(self, lr: float = 0.1, batch_size: int = 4):
        super().__init__()
        self.save_hyperparameters()


def test_the_loggers_get_both_hparams_merged_and_a_clash_is_refused():
    assert logged_hparams(Net(), Data()) == {"lr": 0.1, "activation": None, "batch_size": 4}
    with pytest.raises(RuntimeError, match=r"Error while merging hparams: the keys \['lr'\]"):
        logged_hparams(Net(lr=0.2), Data())


TRUSTED = "lightning.pytorch.cli.instantiate_module"


def test_class_paths_are_built_only_when_already_imported():
    built = rebuilt_arguments(
        Net, {"_instantiator": TRUSTED, "activation": {"class_path": "torch.nn.Tanh"}}, "x"
    )
    assert isinstance(built["activation"], torch.nn.Tanh)
    for saved in (
        {"_instantiator": "os.system"},
        {"_instantiator": TRUSTED, "activation": {"class_path": "not_imported_module.Layer"}},
        {"_instantiator": TRUSTED, "_class_path": "torch.nn.Tanh"},  # not a subclass of Net
    ):
        with pytest.raises(UntrustedCheckpointError):
            rebuilt_arguments(Net, saved, "x")
