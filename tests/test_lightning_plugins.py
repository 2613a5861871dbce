"""`lightning.pytorch.plugins` mapped onto surge's parts (arguments/plugins.py `resolve_plugins`): each
plugin's mapping, Lightning's rules for `plugins=`, and the refusals by name."""

from __future__ import annotations

import signal

import pytest
import torch

import surge
from surge.arguments.plugins import Plugins, resolve_plugins
from surge.checkpoint.writer import AsyncCheckpointWriter, CheckpointWriter
from surge.launch.signals import RequeuePolicy, SignalFlag
from surge.lightning.plugins import (
    AsyncCheckpointIO,
    BitsandbytesPrecision,
    CheckpointIO,
    DeepSpeedPrecision,
    DoublePrecision,
    FSDPPrecision,
    HalfPrecision,
    MixedPrecision,
    Precision,
    TorchCheckpointIO,
    TorchSyncBatchNorm,
    TransformerEnginePrecision,
    XLAPrecision,
)
from surge.lightning.plugins import environments as envs
from surge.lightning.plugins.io import AsyncUserCheckpointWriter, UserCheckpointWriter


class Ranks(envs.ClusterEnvironment):
    """A cluster whose scheduler starts the processes: rank 3 of 4, node 1."""

    creates_processes_externally = True  # type: ignore[assignment]
    main_address = "10.0.0.7"  # type: ignore[assignment]
    main_port = 29400  # type: ignore[assignment]

    @staticmethod
    def detect() -> bool:
        return True

    def world_size(self) -> int:
        return 4

    def set_world_size(self, size: int) -> None: ...

    def global_rank(self) -> int:
        return 3

    def set_global_rank(self, rank: int) -> None: ...

    def local_rank(self) -> int:
        return 1

    def node_rank(self) -> int:
        return 1


class MyIO(CheckpointIO):
    def save_checkpoint(self, checkpoint, path, storage_options=None): ...
    def load_checkpoint(self, path, map_location=None, weights_only=None): return {}  # fmt: skip

    def remove_checkpoint(self, path): ...


def test_slurm_environment_decides_the_requeue_signal():
    assert resolve_plugins(envs.SLURMEnvironment()).requeue == RequeuePolicy(signal.SIGUSR1)
    assert resolve_plugins(envs.SLURMEnvironment(auto_requeue=False)).requeue == RequeuePolicy(None)
    hup = resolve_plugins([envs.SLURMEnvironment(requeue_signal=signal.SIGHUP)]).requeue
    assert hup.signals() == (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    assert hup.exit_code(signal.SIGHUP) == 0 and hup.exit_code(signal.SIGUSR1) == 143
    assert RequeuePolicy(None).signals() == (signal.SIGTERM, signal.SIGINT)


def test_auto_requeue_off_installs_no_handler_for_sigusr1():
    before = signal.getsignal(signal.SIGUSR1)
    with SignalFlag(None, RequeuePolicy(None)).installed():
        assert signal.getsignal(signal.SIGUSR1) is before
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    with SignalFlag(None, RequeuePolicy(signal.SIGHUP)).installed() as flag:
        signal.raise_signal(signal.SIGHUP)
        assert flag.received == signal.SIGHUP and signal.getsignal(signal.SIGUSR1) is before


def test_a_custom_environment_gives_surge_its_ranks_and_address():
    env = resolve_plugins([Ranks()]).environment
    assert env is not None and (env.source, env.world_size, env.global_rank, env.local_rank, env.node_rank) == (
        "plugin", 4, 3, 1, 1,
    )  # fmt: skip
    assert env.init_method() == "tcp://10.0.0.7:29400"


def test_a_custom_environment_the_trainer_must_start_processes_for_is_refused():
    class Inside(Ranks):
        creates_processes_externally = False  # type: ignore[assignment]

    with pytest.raises(surge.MisconfigurationError, match="creates_processes_externally is False"):
        resolve_plugins(Inside())


def test_environments_surge_reads_itself_leave_detection_to_it():
    for cls in (envs.LightningEnvironment, envs.TorchElasticEnvironment, envs.KubeflowEnvironment):
        assert resolve_plugins(cls()) == Plugins(kinds=("ClusterEnvironment",))
    for cls in (envs.LSFEnvironment, envs.MPIEnvironment, envs.XLAEnvironment):
        with pytest.raises(surge.MisconfigurationError, match=f"{cls.__name__} is not supported by surge"):
            cls()


def test_checkpoint_io_maps_to_surges_writers():
    assert type(resolve_plugins(TorchCheckpointIO()).checkpoint_writer) is CheckpointWriter
    assert type(resolve_plugins(AsyncCheckpointIO()).checkpoint_writer) is AsyncCheckpointWriter
    mine = resolve_plugins(MyIO()).checkpoint_writer
    assert isinstance(mine, UserCheckpointWriter) and not mine.links and not mine.asynchronous
    background = resolve_plugins(AsyncCheckpointIO(MyIO())).checkpoint_writer
    assert isinstance(background, AsyncUserCheckpointWriter) and background.asynchronous
    with pytest.raises(TypeError, match="storage_options"):
        TorchCheckpointIO().save_checkpoint({}, "x.ckpt", storage_options={"a": 1})


def test_precision_plugins_map_to_surges():
    def of(plugin):
        return resolve_plugins(plugin).precision

    assert isinstance(of(Precision()), surge.precision.FullPrecision)
    assert isinstance(of(DoublePrecision()), surge.precision.DoublePrecision)
    assert of(HalfPrecision("bf16-true")).param_dtype == torch.bfloat16
    mixed = of(MixedPrecision("bf16-mixed", "cpu"))
    assert isinstance(mixed, surge.precision.MixedPrecision) and mixed.dtype == torch.bfloat16
    scaler = torch.amp.GradScaler("cpu")
    assert of(MixedPrecision("16-mixed", "cpu", scaler)).scaler is scaler
    assert of(FSDPPrecision("bf16-true")).param_dtype == torch.bfloat16
    with pytest.raises(surge.MisconfigurationError, match="does not use a scaler"):
        MixedPrecision("bf16-mixed", "cpu", scaler)
    for cls in (BitsandbytesPrecision, TransformerEnginePrecision, XLAPrecision):
        with pytest.raises(surge.MisconfigurationError, match=f"{cls.__name__} is not supported by surge"):
            cls("16-mixed")
    # DeepSpeed's plugin is built (its format methods answer) and refused where a Trainer would use it
    with pytest.raises(
        surge.MisconfigurationError, match=r"DeepSpeedPrecision\(...\)\] is not supported by surge"
    ):
        resolve_plugins(DeepSpeedPrecision("16-mixed"))


def test_a_precision_subclass_overriding_lightnings_hooks_is_refused():
    class Custom(Precision):
        def forward_context(self): ...

    with pytest.raises(surge.MisconfigurationError, match=r"forward_context.*surge.precision.Precision"):
        resolve_plugins(Custom())


def test_lightnings_rules_for_plugins():
    with pytest.raises(surge.MisconfigurationError, match="multiple values for CheckpointIO"):
        resolve_plugins([TorchCheckpointIO(), AsyncCheckpointIO()])
    with pytest.raises(ValueError, match=r"Received both `precision=bf16-mixed`"):
        resolve_plugins([HalfPrecision()], precision="bf16-mixed")
    with pytest.raises(surge.MisconfigurationError, match="Found invalid type for plugin"):
        resolve_plugins(["some-plugin"])
    with pytest.raises(surge.MisconfigurationError, match="async_checkpoint=True"):
        resolve_plugins(TorchCheckpointIO(), async_checkpoint=True)
    assert resolve_plugins(TorchSyncBatchNorm()).sync_batchnorm
    joined = resolve_plugins(TorchCheckpointIO()).combined(
        resolve_plugins(envs.SLURMEnvironment(auto_requeue=False))
    )
    assert joined.requeue == RequeuePolicy(None) and joined.checkpoint_writer is not None
    with pytest.raises(
        surge.MisconfigurationError, match="checkpoint_io set through both strategy class and plugins"
    ):
        resolve_plugins(TorchCheckpointIO()).combined(resolve_plugins(MyIO()))


def test_the_trainer_is_built_from_the_plugins(tmp_path):
    trainer = surge.Trainer(
        plugins=[MixedPrecision("bf16-mixed", "cpu"), AsyncCheckpointIO()], default_root_dir=tmp_path
    )
    assert isinstance(trainer.precision_plugin, surge.precision.MixedPrecision)
    assert trainer.strategy.checkpoint_writer.asynchronous
    native = surge.Trainer(plugins=[RequeuePolicy(None), CheckpointWriter()], default_root_dir=tmp_path)
    assert not native.strategy.checkpoint_writer.asynchronous
