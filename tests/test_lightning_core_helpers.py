"""The helper modules real projects import from `lightning.pytorch.core` and `.utilities` (found by
the census, tests/oracle/census.py): `core.mixins`, `core.hooks`, `core.saving`, `utilities.memory`,
`utilities.parsing`; each name provided does what Lightning's does, the others are refused by name."""

from __future__ import annotations

import pickle
import threading

import pytest
import torch

from surge.lightning.core import hooks, mixins, saving
from surge.lightning.refuse import LightningNameError
from surge.lightning.utilities import memory, parsing
from surge.module.hparams import AttributeDict


def test_hyperparameters_mixin_gives_any_class_hparams():
    class Config(mixins.HyperparametersMixin):
        def __init__(self, width: int, name: str = "a") -> None:
            self.save_hyperparameters()

    config = Config(3)
    assert dict(config.hparams) == {"width": 3, "name": "a"}
    config.hparams.width = 5
    assert config.hparams_initial == {"width": 3, "name": "a"}  # the saved values, not later changes


def test_out_of_memory_errors_are_told_apart():
    assert memory.is_oom_error(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert memory.is_oom_error(
        RuntimeError("[enforce fail] DefaultCPUAllocator: can't allocate memory: 10 GB")
    )
    assert memory.is_oom_error(RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear"))
    assert not memory.is_oom_error(RuntimeError("shape mismatch"))
    assert not memory.is_oom_error(ValueError("CUDA out of memory"))
    x = torch.ones(2, requires_grad=True) * 2
    detached = memory.recursive_detach({"a": [x]}, to_cpu=True)
    assert not detached["a"][0].requires_grad


def test_parsing_and_saving_helpers_and_their_refusals(tmp_path):
    assert parsing.AttributeDict is AttributeDict
    assert parsing.is_picklable({"a": 1}) and not parsing.is_picklable(threading.Lock())
    path = tmp_path / "x.pt"
    torch.save({"w": torch.ones(2)}, path)
    assert torch.equal(saving.pl_load(path)["w"], torch.ones(2))
    assert saving.get_filesystem(str(path)).exists(str(path))
    assert hooks.ModelHooks.__name__ == "ModelHooks"
    for module, name in (
        (parsing, "save_hyperparameters"),
        (saving, "load_hparams_from_yaml"),
        (hooks, "DataHooks"),
    ):
        with pytest.raises(LightningNameError, match=name):
            getattr(module, name)
    assert pickle.loads(pickle.dumps(AttributeDict(a=1))) == {"a": 1}
