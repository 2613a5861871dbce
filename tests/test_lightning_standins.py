"""Every module and name of Lightning 2.6.6 imports in the Lightning mode: what surge lacks imports as a
stand-in (src/surge/lightning/standins.py) that refuses by name when used; a name Lightning lacks fails
as it fails under Lightning."""

from __future__ import annotations

import re

import pytest

from surge.lightning.refuse import LightningNameError, RefusedAttributeError


@pytest.fixture
def mode():
    """The Lightning finder installed in this process, removed afterwards."""
    from surge.lightning import mode as m

    m.install()
    yield m
    m.uninstall()


# Names projects of the census import that used to be refused at import, and a use of each.
FORMERLY_REFUSED = [
    ("from lightning.fabric.strategies import DDPStrategy as x", "x()", "lightning.fabric.strategies.DDPStrategy"),
    ("from lightning.fabric.loggers import TensorBoardLogger as x", "x('logs')", "lightning.fabric.loggers.TensorBoardLogger"),
    ("from lightning.fabric.accelerators import CUDAAccelerator as x", "x()", "lightning.fabric.accelerators.CUDAAccelerator"),
    ("from lightning.fabric.plugins.collectives import TorchCollective as x", "x()", "TorchCollective"),
    ("from lightning.fabric.wrappers import _unwrap_objects as x", "x({})", "lightning.fabric.wrappers._unwrap_objects"),
    ("from lightning import Fabric as x", "x(accelerator='cpu')", "lightning.fabric.Fabric"),
    ("from lightning.pytorch.loggers import CometLogger as x", "x()", "lightning.pytorch.loggers.CometLogger"),
    ("from lightning.pytorch.loggers.neptune import NeptuneLogger as x", "x()", "NeptuneLogger"),
    ("from lightning.pytorch.accelerators import TPUAccelerator as x", "x()", "TPUAccelerator"),
    ("from lightning.pytorch.accelerators.tpu import TPUAccelerator as x", "x()", "TPUAccelerator"),
    ("from lightning.pytorch.core.saving import _load_from_checkpoint as x", "x(None, 'a.ckpt')", "_load_from_checkpoint"),
    (
        "from lightning.pytorch.trainer.connectors.accelerator_connector import _AcceleratorConnector as x",
        "x()",
        "lightning.pytorch.trainer.connectors.accelerator_connector._AcceleratorConnector",
    ),
    (
        "from lightning.pytorch.trainer.connectors.data_connector import _DataLoaderSource as x",
        "x(None, 'train_dataloader')",
        "_DataLoaderSource",
    ),
    (
        "from lightning.pytorch.utilities.deepspeed import convert_zero_checkpoint_to_fp32_state_dict as x",
        "x('a', 'b')",
        "DeepSpeed",
    ),
    ("from lightning.pytorch.demos.mnist_datamodule import MNISTDataModule as x", "x()", "MNISTDataModule"),
    ("from lightning.pytorch.serve import ServableModule as x", "x()", "lightning.pytorch.serve.ServableModule"),
    ("import lightning.pytorch.loops as m", "m._FitLoop()", "lightning.pytorch.loops._FitLoop"),
    ("from lightning.fabric.strategies.fsdp import _METADATA_FILENAME as x", "bool(x)", "_METADATA_FILENAME"),
]  # fmt: skip


@pytest.mark.parametrize("statement, use, named", FORMERLY_REFUSED)
def test_a_name_lightning_has_imports_and_refuses_when_used(mode, statement, use, named):
    scope: dict = {}
    exec(statement, scope)
    with pytest.raises(LightningNameError, match=re.escape(named)) as err:
        exec(use, scope)
    message = str(err.value)
    assert (
        "is not provided by surge (" in message and "docs/lightning.md" in message
    )  # the reason and where to look


def test_the_fabric_refusal_names_the_alternative(mode):
    from lightning.fabric.strategies import Strategy

    with pytest.raises(
        LightningNameError, match="surge has no Fabric; write a LightningModule and use the Trainer"
    ):
        Strategy()


@pytest.mark.parametrize(
    "statement, error",
    [
        ("from lightning.pytorch.loops import Typo", ImportError),
        ("from lightning.fabric.strategies import DDPStrategyy", ImportError),
        ("import lightning.pytorch.typo", ModuleNotFoundError),
        ("import lightning.fabric.strategies.typo", ModuleNotFoundError),
        ("import pytorch_lightning as pl; pl.loops.Typo", AttributeError),
        ("import lightning.pytorch as pl; pl.typo", AttributeError),
        ("import lightning.pytorch.callbacks.typo", ModuleNotFoundError),
        ("from lightning.pytorch.trainer.states import Typo", ImportError),
    ],
)
def test_a_name_lightning_lacks_fails_as_under_lightning(mode, statement, error):
    with pytest.raises(error) as err:
        exec(statement, {})
    assert not isinstance(err.value, LightningNameError)  # a typo is not dressed up as a refusal


def test_a_subclass_of_a_refused_class_imports_and_refuses_when_built(mode):
    import lightning.fabric as fabric
    from lightning.pytorch.trainer.connectors.accelerator_connector import _AcceleratorConnector

    class MyStrategy(fabric.strategies.Strategy):  # at import time, as a project's module does
        def setup(self) -> None: ...

    assert not isinstance(object(), fabric.strategies.Strategy) and issubclass(
        MyStrategy, fabric.strategies.Strategy
    )
    with pytest.raises(LightningNameError, match=r"lightning\.fabric\.strategies\.Strategy "):
        MyStrategy()
    with pytest.raises(RefusedAttributeError, match="_AcceleratorConnector"):
        _AcceleratorConnector.some_classmethod  # noqa: B018  (asking the class is a use too)
    assert not hasattr(_AcceleratorConnector, "__wrapped__")  # a probe of a private name is a plain miss
    assert not hasattr(_AcceleratorConnector, "some_classmethod")  # hasattr answers, as for any class
    assert getattr(MyStrategy, "launch", None) is None


def test_one_stand_in_per_name_whatever_the_spelling(mode):
    import lightning.fabric.strategies
    import lightning_fabric.strategies
    import pytorch_lightning.loops
    from lightning.pytorch import loops

    assert pytorch_lightning.loops is loops
    assert lightning_fabric.strategies.DDPStrategy is lightning.fabric.strategies.DDPStrategy
    import lightning

    assert lightning.Fabric is lightning.fabric.Fabric


def test_a_refused_value_refuses_every_use_but_repr(mode):
    from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout as value

    assert "default_pg_timeout" in repr(value)
    for use in (bool, len, iter, lambda v: v.seconds, lambda v: v(), lambda v: v < 1, lambda v: v[0]):
        with pytest.raises(LightningNameError, match="default_pg_timeout"):
            use(value)


def test_provided_names_are_not_stand_ins(mode):
    from lightning.fabric.accelerators.cuda import num_cuda_devices
    from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
    from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm
    from lightning.pytorch.plugins.io import TorchCheckpointIO as PlTorchCheckpointIO
    from lightning.pytorch.strategies import StrategyRegistry
    from lightning.pytorch.utilities.parsing import get_init_args
    from lightning.pytorch.utilities.signature_utils import is_param_in_hook_signature

    from surge.lightning.standins import refusal

    assert TorchCheckpointIO is PlTorchCheckpointIO
    assert "ddp" in StrategyRegistry and "fsdp" in StrategyRegistry.available_strategies()
    for obj in (num_cuda_devices, Tqdm, get_init_args, is_param_in_hook_signature, StrategyRegistry):
        assert refusal(obj) is None


def test_a_strategy_surge_cannot_build_registers_and_is_refused_when_built(mode):
    from lightning.fabric.strategies import Strategy as FabricStrategy
    from lightning.pytorch.strategies import StrategyRegistry

    StrategyRegistry.register("fabric_thing", FabricStrategy, description="a Fabric strategy")
    try:
        assert "fabric_thing" in StrategyRegistry
        with pytest.raises(LightningNameError, match="surge has no Fabric"):
            StrategyRegistry.get("fabric_thing")
    finally:
        StrategyRegistry.remove("fabric_thing")


def test_the_list_of_lightning_names_loads_only_on_a_miss(mode):
    import sys

    from surge.lightning import names

    names._table.cache_clear()
    sys.modules.pop("surge.lightning.names_data", None)
    import lightning.fabric.utilities.seed  # noqa: F401
    import lightning.pytorch as pl  # noqa: F401
    from lightning.pytorch.callbacks import ModelCheckpoint  # noqa: F401
    from lightning.pytorch.strategies import DDPStrategy  # noqa: F401

    assert "surge.lightning.names_data" not in sys.modules
    from lightning.pytorch.loops import _FitLoop  # noqa: F401

    assert "surge.lightning.names_data" in sys.modules


@pytest.mark.parametrize(
    "module, name",
    [
        ("lightning", "LightningApp"),
        ("lightning.pytorch", "LightningWork"),
        ("lightning.pytorch.demos", "MNIST"),
    ],
)
def test_a_name_surge_refuses_and_lightning_lacks_is_a_miss_as_under_lightning(mode, module, name):
    """Lightning 2.6.6 has no such name: `hasattr` is False and `getattr(m, name, None)` None, as there."""
    import importlib

    found = importlib.import_module(module)
    assert not hasattr(found, name)
    assert getattr(found, name, None) is None
    with pytest.raises(ImportError) as err:
        exec(f"from {module} import {name}", {})
    assert not isinstance(err.value, LightningNameError)


@pytest.mark.parametrize(
    "module, name, source",
    [
        (
            "lightning.pytorch.strategies.ddp",
            "_TORCH_GREATER_EQUAL_2_3",
            "lightning.fabric.utilities.imports",
        ),
        ("lightning.pytorch.core.module", "_TORCH_GREATER_EQUAL_2_2", "lightning.fabric.utilities.imports"),
        ("pytorch_lightning.strategies.ddp", "_IS_WINDOWS", "lightning.fabric.utilities.imports"),
        ("lightning.fabric.utilities.seed", "_NUMPY_AVAILABLE", "lightning.fabric.utilities.imports"),
    ],
)
def test_a_flag_lightning_re_exports_is_the_value_of_its_source(mode, module, name, source):
    """`if _TORCH_GREATER_EQUAL_2_3:` at a script's import reads a bool, as under Lightning, where the
    module imports the flag (a bool or a requirement) from its `imports` module."""
    import importlib

    value = getattr(importlib.import_module(module), name)
    assert bool(value) in (True, False)  # readable, not a refusal
    assert value is getattr(importlib.import_module(source), name)


def test_a_flag_of_a_package_surge_lacks_still_refuses_when_read(mode):
    from lightning.pytorch.loggers.comet import _COMET_AVAILABLE

    with pytest.raises(LightningNameError, match="_COMET_AVAILABLE"):
        bool(_COMET_AVAILABLE)


def test_a_star_import_of_callbacks_gives_every_callback_surge_provides(mode):
    """`from lightning.pytorch.callbacks import *` gives Lightning's callbacks that surge has (a script
    then builds `RichProgressBar()` or `Timer()` by the bare name)."""
    found: dict = {}
    exec("from lightning.pytorch.callbacks import *", found)
    for name in (
        "RichProgressBar",
        "Timer",
        "StochasticWeightAveraging",
        "BackboneFinetuning",
        "TQDMProgressBar",
    ):
        assert name in found, name
    assert "LambdaCallback" not in found  # one surge lacks: not handed out by a star import


def test_a_version_gate_takes_the_branch_it_takes_under_lightning_2_6_6(mode):
    import lightning
    import lightning.fabric
    import lightning_fabric
    import pytorch_lightning
    from packaging.version import Version

    import surge

    versions = {m.__version__ for m in (lightning, pytorch_lightning, lightning.fabric, lightning_fabric)}
    assert versions == {"2.6.6"} and Version(lightning.__version__) >= Version("2.0")
    assert surge.__version__ != "2.6.6"  # surge's own version stays its own


def test_a_stand_in_class_is_a_base_with_any_metaclass_or_other_base(mode):
    """A project's class may derive from a class surge only stands in for together with a metaclass
    or a base of its own (the conflict would otherwise fail its import); it is refused when built."""
    import abc
    import enum

    from lightning.fabric import Fabric
    from lightning.fabric.strategies import Strategy

    class Meta(abc.ABCMeta):
        pass

    class Mine(Strategy, metaclass=Meta):
        pass

    class Flavour(Fabric, enum.Enum):
        pass

    assert issubclass(Mine, Strategy) and not isinstance(object(), Strategy) and type(Mine) is Meta
    assert issubclass(Flavour, Fabric)
    with pytest.raises(LightningNameError, match="Strategy"):
        Mine()
