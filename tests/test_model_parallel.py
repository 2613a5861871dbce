"""ModelParallel's checks, in one process: its arguments and mesh sizes refused by name at
construction or `Trainer(...)`, Lightning's "auto" sizes, the plan checks after configure_model (on
a 4-rank mesh of torch's fake process group: no communication), a checkpoint from another mesh, and
clipping by the global norm. 4 real processes: tests/distributed/test_mesh_training.py."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

import surge
from surge.errors import CheckpointError, MisconfigurationError, SurgeTypeError
from surge.lightning import strategies as S
from surge.strategies import ModelParallel
from surge.strategies.mesh import MeshShape
from surge.strategies.mesh_checks import (
    check_data_parallel,
    check_plan_divides,
    check_tensor_parallel_applied,
)
from surge.utilities.clip import clip_grad_norm_over_meshes


def test_arguments_are_refused_by_name_when_built():
    with pytest.raises(MisconfigurationError, match=r"ModelParallel\(pipeline_schedule\)='ZB'"):
        ModelParallel(data_parallel=2, tensor_parallel=1, pipeline_parallel=2, pipeline_schedule="ZB")
    with pytest.raises(MisconfigurationError, match=r"ModelParallel\(tensor_parallel\)=0"):
        ModelParallel(tensor_parallel=0)
    with pytest.raises(MisconfigurationError, match=r"ModelParallelStrategy\(data_parallel_size\)='two'"):
        S.ModelParallelStrategy(data_parallel_size="two")
    with pytest.raises(MisconfigurationError, match="save_distributed_checkpoint"):
        S.ModelParallelStrategy(save_distributed_checkpoint="yes")


def test_a_mesh_that_does_not_cover_the_processes_is_refused_by_the_trainer():
    with pytest.raises(MisconfigurationError, match=r"data_parallel=2, tensor_parallel=2\) is a mesh of 4"):
        surge.Trainer(
            accelerator="cpu", devices=3, strategy=ModelParallel(data_parallel=2, tensor_parallel=2)
        )
    # Lightning's "auto" data-parallel size is the number of nodes: 1 x 2 does not cover 4 processes
    with pytest.raises(MisconfigurationError, match=r"data_parallel_size=1, tensor_parallel_size=2"):
        surge.Trainer(accelerator="cpu", devices=4, strategy=S.ModelParallelStrategy(tensor_parallel_size=2))


def test_auto_sizes_are_lightnings_and_sampling_follows_the_data_parallel_dimension():
    strategy = S.ModelParallelStrategy()
    surge.Trainer(accelerator="cpu", devices=4, strategy=strategy, logger=False)
    assert strategy.shape == MeshShape(1, 4) and strategy.data_parallel_size == 1
    two_by_two = ModelParallel(data_parallel=2, tensor_parallel=2)
    surge.Trainer(accelerator="cpu", devices=4, strategy=two_by_two, logger=False)
    assert two_by_two.data_parallel_size == 2  # what effective_batch_size and scale_lr count
    shape = MeshShape(2, 2)
    assert [shape.sampler_kwargs(r) for r in range(4)] == [
        {"num_replicas": 2, "rank": 0}, {"num_replicas": 2, "rank": 0},
        {"num_replicas": 2, "rank": 1}, {"num_replicas": 2, "rank": 1},
    ]  # fmt: skip


def test_a_module_has_no_mesh_without_a_mesh_strategy():
    assert surge.Module().device_mesh is None


def test_the_lightning_strategy_needs_configure_model():
    strategy = S.ModelParallelStrategy(1, 1)
    with pytest.raises(SurgeTypeError, match="override configure_model"):
        strategy.setup_module(surge.Module())


@pytest.fixture
def mesh():
    """A 2 x 2 mesh of torch's fake process group (rank 0 of 4; collectives do nothing)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    try:
        yield init_device_mesh("cpu", (2, 2), mesh_dim_names=("data_parallel", "tensor_parallel"))
    finally:
        dist.destroy_process_group()


def test_plan_checks(mesh):
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    plain = nn.Sequential(nn.Linear(4, 6), nn.Linear(6, 5))
    with pytest.raises(MisconfigurationError, match="tensor-parallel size of 2, but no parameter is split"):
        check_tensor_parallel_applied(plain, 2, "ModelParallel")
    parallelize_module(plain, mesh["tensor_parallel"], {"0": ColwiseParallel(), "1": ColwiseParallel()})
    check_tensor_parallel_applied(plain, 2, "ModelParallel")
    with pytest.raises(MisconfigurationError, match=r"splits 1.weight \(5, 6\) along dim 0, 1.bias \(5,\)"):
        check_plan_divides(plain, 2, "ModelParallel")
    even = nn.Sequential(nn.Linear(4, 6))
    parallelize_module(even, mesh["tensor_parallel"], {"0": ColwiseParallel()})
    check_plan_divides(even, 2, "ModelParallel")
    with pytest.raises(MisconfigurationError, match=r"\['0.weight', '0.bias'\] are not sharded over"):
        check_data_parallel(even, "ModelParallel")
    fully_shard(even, mesh=mesh["data_parallel"])
    check_data_parallel(even, "ModelParallel")
    check_plan_divides(even, 2, "ModelParallel")  # also on the 2-D mesh fully_shard made


def test_a_load_that_fails_on_another_layout_names_both_layouts_and_the_fix():
    from surge.strategies.mesh_resume import layout_errors, saved_layout

    assert saved_layout({"mesh": [1, 4]}) == "a mesh of data_parallel=1 x tensor_parallel=4"
    assert saved_layout({"sharded": {"world_size": 3}}) == "3 process(es) without a device mesh (FSDP)"
    assert saved_layout({"state_dict": {}}).startswith("one whole state dict")
    with pytest.raises(CheckpointError) as moved, layout_errors({"mesh": [1, 4]}, [2, 2], "a.ckpt"):
        raise CheckpointError("shape mismatches: ...")
    assert str(moved.value).startswith("shape mismatches: ...")
    assert (
        "saved on a mesh of data_parallel=1 x tensor_parallel=4 and this run is a mesh of "
        "data_parallel=2 x tensor_parallel=2" in str(moved.value)
    )
    assert "Resume on the layout it was saved with" in str(moved.value)
    with (
        pytest.raises(CheckpointError, match=r"^shape mismatches$"),
        layout_errors({"mesh": [2, 2]}, [2, 2], "a"),
    ):
        raise CheckpointError("shape mismatches")  # the same layout: not the layout's fault


def test_clipping_over_meshes_equals_torchs_for_plain_tensors():
    torch.manual_seed(0)
    ours, theirs = [torch.nn.Parameter(torch.randn(5, 3)) for _ in range(3)], []
    for p in ours:
        p.grad = torch.randn_like(p) * 3
        theirs.append(torch.nn.Parameter(p.detach().clone()))
        theirs[-1].grad = p.grad.clone()
    norm = clip_grad_norm_over_meshes(ours, 0.5)
    expected = torch.nn.utils.clip_grad_norm_(theirs, 0.5)
    torch.testing.assert_close(norm, expected)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a.grad, b.grad)


def test_parameters_on_several_meshes_are_clipped_by_surges_norm(mesh):
    from torch.distributed.tensor import Shard, distribute_tensor

    from surge.utilities.clip import norm_clipper

    two_d = nn.Parameter(distribute_tensor(torch.randn(4, 4), mesh, [Shard(0), Shard(1)]))
    one_d = nn.Parameter(distribute_tensor(torch.randn(4), mesh["data_parallel"], [Shard(0)]))
    for p in (two_d, one_d):
        p.grad = distribute_tensor(torch.ones(p.shape), p.device_mesh, p.placements)
    with pytest.raises(RuntimeError, match="same mesh"):  # torch's (Lightning's) clipping
        torch.nn.utils.clip_grad_norm_([two_d, one_d], 0.5)
    assert norm_clipper([two_d, one_d]) is clip_grad_norm_over_meshes
    assert norm_clipper([one_d]) is torch.nn.utils.clip_grad_norm_


@pytest.mark.parametrize(
    "settings", [{"compile": True}, {"compile": "step"}, {"activation_checkpointing": [nn.Linear]}]
)
def test_compile_and_activation_checkpointing_are_accepted_on_a_mesh(settings):
    strategy = ModelParallel(data_parallel=1, tensor_parallel=1)
    surge.Trainer(accelerator="cpu", devices=1, strategy=strategy, logger=False, **settings)


def test_compiling_the_step_through_pipeline_stages_is_refused_by_the_trainer():
    strategy = ModelParallel(data_parallel=1, tensor_parallel=1, pipeline_parallel=2)
    with pytest.raises(
        MisconfigurationError, match=r"Trainer\(compile='step'\) with ModelParallel\(pipeline_parallel=2\)"
    ):
        surge.Trainer(accelerator="cpu", devices=2, strategy=strategy, logger=False, compile="step")


class _NoReset(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(6))


def test_a_model_built_on_the_meta_device_is_allocated_shard_by_shard(mesh):
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    from surge.strategies.materialize import is_meta, materialize

    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(4, 6), nn.LayerNorm(6), _NoReset())
    parallelize_module(model, mesh["tensor_parallel"], {"0": ColwiseParallel()})
    fully_shard(model, mesh=mesh["data_parallel"])
    assert is_meta(model)
    with pytest.warns(UserWarning, match="_NoReset define no reset_parameters"):
        materialize(model, torch.device("cpu"))
    assert not is_meta(model)
    assert model[0].weight.to_local().shape == (2, 4)  # 6 rows: 3 per tensor-parallel rank, 2 of them here
    assert torch.equal(model[1].weight.to_local(), torch.ones(3))  # LayerNorm's reset_parameters ran
    assert model[0].weight.to_local().abs().sum() > 0
