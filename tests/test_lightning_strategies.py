"""`lightning.pytorch.strategies` / `.accelerators` in surge's Lightning layer: Lightning's arguments
mapped onto surge's strategies, and each one surge cannot honour refused by name at construction
(or at Trainer(...)), before any work. One-process members of `trainer.strategy`."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.fsdp import CPUOffload, ShardingStrategy
from torch.distributed.fsdp.wrap import (
    ModuleWrapPolicy,
    size_based_auto_wrap_policy,
    transformer_auto_wrap_policy,
)

import surge
from surge.errors import MisconfigurationError
from surge.lightning import accelerators as A
from surge.lightning import strategies as S
from surge.lightning.mode import surge_name
from surge.strategies.ddp import DDPStrategy as SurgeDDP
from surge.strategies.fsdp import FSDPStrategy as SurgeFSDP
from surge.strategies.parallel import ProcessGroupStrategy


def test_lightning_modules_map_to_the_layer():
    for sub in (
        "strategies",
        "strategies.ddp",
        "strategies.fsdp",
        "strategies.single_device",
        "strategies.deepspeed",
    ):
        assert surge_name(f"lightning.pytorch.{sub}") == "surge.lightning.strategies"
    for sub in ("accelerators", "accelerators.cpu", "accelerators.cuda"):
        assert surge_name(f"pytorch_lightning.{sub}") == "surge.lightning.accelerators"


def test_ddp_strategy_takes_lightnings_arguments():
    s = S.DDPStrategy(
        find_unused_parameters=True, static_graph=False, bucket_cap_mb=10, broadcast_buffers=False
    )
    assert isinstance(s, SurgeDDP) and isinstance(s, S.ParallelStrategy) and isinstance(s, S.Strategy)
    assert s.ddp_kwargs == {
        "find_unused_parameters": True, "static_graph": False, "gradient_as_bucket_view": True,
        "bucket_cap_mb": 10, "broadcast_buffers": False,
    }  # fmt: skip
    assert s.timeout.total_seconds() == 1800 and s.cluster_environment is None and s.checkpoint_io is None
    assert S.DDPStrategy(timeout=None, process_group_backend="gloo").backend == "gloo"


def test_ddp_comm_hook_is_wrapped_as_lightning_does():
    wrapped = []

    def wrapper(hook):
        wrapped.append(hook)
        return hook

    s = S.DDPStrategy(
        ddp_comm_hook=default_hooks.allreduce_hook, ddp_comm_wrapper=wrapper, ddp_comm_state=None
    )
    assert wrapped == [default_hooks.allreduce_hook] and s.comm_hook is default_hooks.allreduce_hook
    assert not s.wrap_gradient_allreduce(lambda h: h)  # DDP takes one hook: the user's


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"start_method": "thread"}, "start_method"),
        ({"model_averaging_period": 4}, "model_averaging_period=4"),
        ({"ddp_comm_wrapper": default_hooks.fp16_compress_wrapper}, "ddp_comm_wrapper"),
        ({"device_ids": [0]}, "device_ids"),
        ({"cluster_environment": object()}, "invalid type for plugin"),
        ({"checkpoint_io": object()}, "invalid type for plugin"),
        ({"precision_plugin": object()}, "invalid type for plugin"),
        ({"accelerator": "cuda"}, "accelerator"),
    ],
)
def test_ddp_strategy_refuses_by_name(kwargs, named):
    with pytest.raises(MisconfigurationError, match=named.replace("(", r"\(").replace("[", r"\[")):
        S.DDPStrategy(**kwargs)


def test_fsdp_strategy_maps_onto_fsdp2():
    s = S.FSDPStrategy(
        auto_wrap_policy={nn.Linear}, sharding_strategy=ShardingStrategy.SHARD_GRAD_OP, cpu_offload=True
    )
    assert isinstance(s, SurgeFSDP) and s.shard_classes == (nn.Linear,)
    assert (
        s.reshard_after_forward is False
        and s.offload_params is True
        and s.cpu_offload == CPUOffload(offload_params=True)  # Lightning's: torch's dataclass
        and s.activation_checkpointing_policy is None
    )
    assert S.FSDPStrategy(auto_wrap_policy=ModuleWrapPolicy({nn.GRU})).shard_classes == (nn.GRU,)
    partial = functools.partial(
        transformer_auto_wrap_policy, transformer_layer_cls={nn.TransformerEncoderLayer}
    )
    assert S.FSDPStrategy(auto_wrap_policy=partial).shard_classes == (nn.TransformerEncoderLayer,)
    sized = functools.partial(size_based_auto_wrap_policy, min_num_params=1000)
    assert S.FSDPStrategy(auto_wrap_policy=sized).shard_min_params == 1000
    full = S.FSDPStrategy(cpu_offload=CPUOffload(offload_params=False), state_dict_type="sharded")
    assert full.reshard_after_forward is True and full.offload_params is False
    assert S.FSDPStrategy(activation_checkpointing_policy={nn.Linear}).activation_checkpointing_policy == (
        nn.Linear,
    )
    assert S.FSDPStrategy(activation_checkpointing=[nn.Linear]).activation_checkpointing_policy == (
        nn.Linear,
    )


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"sharding_strategy": "NO_SHARD"}, "NO_SHARD"),
        ({"sharding_strategy": "HYBRID_SHARD"}, "HYBRID_SHARD"),
        ({"sharding_strategy": "HALF"}, "sharding_strategy"),
        ({"mixed_precision": object()}, "mixed_precision"),
        ({"device_mesh": (1, 2)}, "device_mesh"),
        ({"limit_all_gathers": True}, "limit_all_gathers"),
        ({"use_orig_params": False}, "use_orig_params"),
        ({"auto_wrap_policy": lambda *a, **k: True}, "auto_wrap_policy"),
        ({"activation_checkpointing_policy": lambda *a, **k: True}, "activation_checkpointing_policy"),
        (
            {"activation_checkpointing": nn.Linear, "activation_checkpointing_policy": {nn.Linear}},
            "only the latter",
        ),
        ({"state_dict_type": "local"}, "state_dict_type"),
        ({"precision_plugin": object()}, "invalid type for plugin"),
    ],
)
def test_fsdp_strategy_refuses_by_name(kwargs, named):
    with pytest.raises(MisconfigurationError, match=named):
        S.FSDPStrategy(**kwargs)


@pytest.mark.parametrize("cls", [S.DeepSpeedStrategy, S.XLAStrategy, S.SingleDeviceXLAStrategy])
def test_strategies_without_an_engine_are_refused_when_built(cls):
    with pytest.raises(MisconfigurationError, match=cls.__name__):
        cls()
    if cls is S.DeepSpeedStrategy:
        with pytest.raises(MisconfigurationError, match="FSDPStrategy"):
            cls(stage=3)


def test_registries_list_surges_names():
    assert {"ddp", "fsdp", "single_device"} <= set(S.StrategyRegistry.available_strategies())
    assert A.AcceleratorRegistry.available_accelerators() >= {"cpu", "cuda", "mps"}
    assert isinstance(A.AcceleratorRegistry.get("cpu"), A.CPUAccelerator)


def test_single_device_strategy_is_the_trainers_object_with_lightnings_members():
    strategy = S.SingleDeviceStrategy(device="cpu")
    trainer = surge.Trainer(strategy=strategy, accelerator=A.CPUAccelerator(), devices=1, logger=False)
    assert trainer.strategy is strategy and isinstance(trainer.accelerator, A.CPUAccelerator)
    assert (
        strategy.root_device == torch.device("cpu") and strategy.world_size == 1 and strategy.is_global_zero
    )
    x = torch.tensor([1.0, 2.0])
    assert strategy.reduce(x) is x and strategy.all_gather(x) is x and strategy.broadcast("a") == "a"
    assert strategy.reduce_boolean_decision(False) is False
    strategy.barrier()
    strategy.barrier("named")
    assert (
        strategy.model is None
        and strategy.lightning_module is None
        and strategy.distributed_sampler_kwargs is None
    )
    assert trainer.accelerator.auto_device_count() == 1
    assert trainer.accelerator.get_parallel_devices(2) == [torch.device("cpu")] * 2


def test_single_device_strategy_refuses_another_device_or_several_processes():
    with pytest.raises(MisconfigurationError, match="devices=2"):
        surge.Trainer(strategy=S.SingleDeviceStrategy(), accelerator="cpu", devices=2, logger=False)
    with pytest.raises(MisconfigurationError, match="device='cuda:1'"):
        surge.Trainer(strategy=S.SingleDeviceStrategy("cuda:1"), accelerator="cpu", devices=1, logger=False)


def test_ddp_strategy_checks_parallel_devices_against_the_trainer():
    given = S.DDPStrategy(parallel_devices=[torch.device("cpu")] * 2)
    with pytest.raises(MisconfigurationError, match="parallel_devices"):
        surge.Trainer(strategy=given, accelerator="cpu", devices=1, logger=False)


def test_strategy_strings_lightning_has():
    assert isinstance(
        surge.Trainer(strategy="single_device", logger=False).strategy, surge.strategies.SingleDeviceStrategy
    )
    for name, cls in (("ddp_find_unused_parameters_false", SurgeDDP), ("fsdp_cpu_offload", SurgeFSDP)):
        assert issubclass(
            surge.config.registry.STRATEGIES.get(surge.config.registry.STRATEGIES.name_of(name)), cls
        )
    for name in ("deepspeed", "xla", "model_parallel"):
        with pytest.raises(MisconfigurationError, match=f"strategy='{name}'"):
            surge.Trainer(strategy=name, logger=False)


def test_an_accelerator_that_is_not_here_is_refused():
    class Missing(A.CUDAAccelerator):
        @staticmethod
        def is_available() -> bool:
            return False

    with pytest.raises(MisconfigurationError, match="Missing"):
        surge.Trainer(accelerator=Missing(), logger=False)
    with pytest.raises(MisconfigurationError, match="XLAAccelerator"):
        A.XLAAccelerator()


def test_parallel_strategy_members_before_the_group_exists():
    s = S.DDPStrategy()
    assert isinstance(s, ProcessGroupStrategy)
    x = torch.tensor(3.0)
    assert s.broadcast({"a": 1}) == {"a": 1} and s.reduce(x) is x and s.all_gather(x) is x
    assert s.reduce("text") == "text"


def test_plugins_given_to_a_strategy_are_the_trainers_and_one_kind_comes_from_one_place():
    """DDPStrategy(cluster_environment=, checkpoint_io=) decide what Trainer(plugins=) would; the same
    kind given to both is refused with Lightning's words."""
    from surge.arguments.plugins import resolve_plugins
    from surge.lightning.plugins import TorchCheckpointIO
    from surge.lightning.plugins.environments import SLURMEnvironment

    s = S.DDPStrategy(
        cluster_environment=SLURMEnvironment(auto_requeue=False), checkpoint_io=TorchCheckpointIO()
    )
    joined = resolve_plugins([]).combined(resolve_plugins(list(s.plugin_objects)))
    assert joined.requeue.signal is None and joined.checkpoint_writer is not None
    assert set(joined.kinds) == {"ClusterEnvironment", "CheckpointIO"}
    with pytest.raises(
        MisconfigurationError, match="checkpoint_io set through both strategy class and plugins"
    ):
        surge.Trainer(
            strategy=S.DDPStrategy(checkpoint_io=TorchCheckpointIO()), plugins=[TorchCheckpointIO()]
        )


@pytest.mark.parametrize("method", ["popen", "spawn", "fork", "forkserver"])
def test_ddp_strategy_start_method_is_surges(method):
    """Lightning's `start_method` is surge's own: "popen" runs the script again per rank, the others
    start the ranks from inside each stage (tests/distributed/test_spawn.py runs them)."""
    assert S.DDPStrategy(start_method=method).start_method == method
