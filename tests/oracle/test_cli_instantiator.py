"""LightningCLI's hyper-parameters against real Lightning: the CLI hands `save_hyperparameters()` the
config's section with `_instantiator` (and, in subclass mode, `_class_path`), which `model.hparams`,
hparams.yaml and the checkpoint hold; `load_from_checkpoint` builds the module from them again (its
class-typed arguments from their `class_path`), and refuses an instantiator it does not trust."""

import pytest
from oracle_runs import run_both

INSTANTIATOR = "lightning.pytorch.cli.instantiate_module"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return run_both("cli_instantiator.py", tmp_path_factory.mktemp("cli_instantiator"))


def test_the_cli_records_lightnings_hyperparameters(runs):
    lightning, surge = runs
    theirs = lightning.record
    assert theirs["fixed.model_hparams"]["_instantiator"] == INSTANTIATOR
    assert (
        theirs["fixed.model_hparams"]["activation"]["class_path"] == "torch.nn.Tanh"
    )  # the config, not the object
    assert theirs["subclass.model_hparams"]["_class_path"] == "__main__.Model"
    for key in theirs:
        if key.endswith(("_hparams", "hparams_yaml", "hyper_parameters")):
            assert surge.record[key] == theirs[key], key


def test_load_from_checkpoint_builds_from_them(runs):
    lightning, surge = runs
    theirs = lightning.record
    assert theirs["fixed.loaded_activation"] == "Tanh" and theirs["fixed.loaded_weights_equal"]
    assert theirs["subclass.loaded_class"] == "Base"  # the class asked; its own arguments only
    assert theirs["forged_refused"]
    assert surge.record == theirs
