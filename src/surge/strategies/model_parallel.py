"""Model parallelism on a 2-D device mesh: tensor parallel (DTensor's `parallelize_module`) within
each data-parallel replica, FSDP2 (`fully_shard`) across replicas.

The strategy builds the named mesh (`"data_parallel"`, `"tensor_parallel"`) once per process group
and the module finds it as `self.device_mesh` in `configure_model`, where the user applies their
tensor-parallel plan (and, if they wish, `fully_shard` over `self.device_mesh["data_parallel"]`).
Then surge shards whatever is left over the data-parallel dimension, with the precision's
mixed-precision policy, under a root unit of its own (as its FSDP strategy does). What users get
wrong is surge's: the sampler's rank and size are the data-parallel coordinates (the ranks of one
tensor-parallel group read the same batch), metrics are reduced over the data-parallel group only,
clipping takes the global norm over every shard, accumulation defers FSDP's reduce-scatter, and a
plan that does not divide a layer, or leaves a parameter out of the data-parallel sharding, is
refused. A model built on the meta device is allocated shard by shard and initialized by its layers'
reset_parameters(), as Lightning does. Checkpoints are surge's sharded ones (DCP), and resume on the same mesh.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any, Literal

import torch.distributed as dist
from torch import nn

from ..errors import MisconfigurationError, SurgeRuntimeError, bad_value
from .base import Layout
from .fsdp import FSDPStrategy, _fsdp, _Steps
from .materialize import is_meta, materialize
from .mesh import DATA, GroupReducer, MeshShape
from .mesh_checks import check_data_parallel, check_plan_divides, check_tensor_parallel_applied

Size = int | Literal["auto"]


class ModelParallel(FSDPStrategy):
    """Tensor parallel x FSDP2 on a `data_parallel` x `tensor_parallel` mesh of processes.

    `"auto"` sizes are Lightning's: `tensor_parallel` = the processes of one node, `data_parallel`
    = the number of nodes. shard, reshard_after_forward and cpu_offload are `FSDPStrategy`'s,
    for the units surge shards itself. `pipeline_parallel` must be 1 (not built yet).
    """

    name = "model_parallel"
    sizes = ("data_parallel", "tensor_parallel")  # the constructor's names for the two sizes

    def __init__(
        self,
        *,
        data_parallel: Size = "auto",
        tensor_parallel: Size = "auto",
        pipeline_parallel: int = 1,
        shard: Any = None,
        reshard_after_forward: bool = True,
        cpu_offload: bool = False,
        timeout: datetime.timedelta | float = datetime.timedelta(minutes=30),
        process_group_backend: str | None = None,
    ) -> None:
        if pipeline_parallel != 1:
            raise MisconfigurationError(
                f"{type(self).__name__}(pipeline_parallel={pipeline_parallel!r}) is not supported yet: surge "
                "has no pipeline-parallel engine. Leave pipeline_parallel=1 (tensor x data parallel)."
            )
        super().__init__(
            shard=shard, reshard_after_forward=reshard_after_forward, cpu_offload=cpu_offload,
            timeout=timeout, process_group_backend=process_group_backend,
        )  # fmt: skip
        self._asked = (_size(self, self.sizes[0], data_parallel), _size(self, self.sizes[1], tensor_parallel))
        self.shape: MeshShape | None = None  # known once the layout is (check_layout)
        self._mesh: Any = None
        self._mesh_world: Any = None  # the default group the mesh was built in
        self._reducer = GroupReducer(self._data_parallel_group)

    # -- the mesh --------------------------------------------------------------------------
    def check_layout(self, layout: Layout) -> None:
        super().check_layout(layout)
        dp, tp = self._asked
        self.shape = MeshShape(
            layout.num_nodes if dp == "auto" else dp,
            layout.processes_per_node if tp == "auto" else tp,
            owner=type(self).__name__,
        )
        asked = f"Trainer(devices={layout.requested_devices!r}, num_nodes={layout.num_nodes})"
        self.shape.check_world(layout.processes, self.sizes, asked)

    def check_settings(self, **settings: Any) -> None:
        given = [f"{name}=..." for name, value in settings.items() if value not in (None, False)]
        if given:
            raise MisconfigurationError(
                f"Trainer({', '.join(given)}) with {type(self).__name__} is not supported yet: compiling and "
                "activation checkpointing on a device mesh are not built. Leave them out (or call torch.compile "
                "or checkpoint_wrapper on your layers yourself in configure_model, after the plan)."
            )

    def setup_environment(self, device: Any) -> None:
        super().setup_environment(device)
        if self._mesh is None or self._mesh_world is not dist.group.WORLD:  # once per process group
            self._mesh, self._mesh_world = self._shape().build(device.type), dist.group.WORLD

    @property
    def device_mesh(self) -> Any:
        """The DeviceMesh (`mesh["data_parallel"]`, `mesh["tensor_parallel"]`), once processes started."""
        if self._mesh is None:
            raise SurgeRuntimeError(
                "Accessing the device mesh before processes have initialized is not allowed: it exists once "
                "the processes have started; use it in configure_model"
            )
        return self._mesh

    def _shape(self) -> MeshShape:
        if self.shape is None:
            raise MisconfigurationError(
                f"{type(self).__name__} is used before the Trainer checked its layout"
            )
        return self.shape

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int]:
        return self._shape().sampler_kwargs(self.global_rank)

    @property
    def data_parallel_size(self) -> int:
        return self._shape().data_parallel

    @property
    def reducer(self) -> GroupReducer:  # type: ignore[override]
        return self._reducer

    def _data_parallel_group(self) -> Any:
        return self.device_mesh[DATA].get_group()

    # -- the module ------------------------------------------------------------------------
    def setup_module(self, module: nn.Module) -> nn.Module:
        if isinstance(self.wrapped, _Steps) and self.wrapped.module is module:
            return module  # parallelized by an earlier stage of this Trainer: once
        owner, shape = type(self).__name__, self._shape()
        check_tensor_parallel_applied(module, shape.tensor_parallel, owner)
        check_plan_divides(module, shape.tensor_parallel, owner)
        self.module = module
        if not is_meta(module):
            module.to(self.device)
        fsdp = _fsdp()
        options = self._shard_options(fsdp)
        for unit in self._units(module):
            if not isinstance(unit, fsdp.FSDPModule):  # the user's own units stay as they made them
                fsdp.fully_shard(unit, **options)
        self.wrapped = fsdp.fully_shard(_Steps(module), **options)
        materialize(module, self.device)  # a model built on the meta device: each rank's shards only
        check_data_parallel(module, owner)
        return module

    def _shard_options(self, fsdp: Any) -> dict[str, Any]:
        return {**super()._shard_options(fsdp), "mesh": self.device_mesh[DATA]}

    # -- checkpoints -----------------------------------------------------------------------
    def save_checkpoint(self, state: dict[str, Any], path: str | Path) -> None:
        shape = self._shape()
        super().save_checkpoint({**state, "mesh": [shape.data_parallel, shape.tensor_parallel]}, path)

    def load_checkpoint(self, path: str | Path) -> dict[str, Any]:
        ckpt = super().load_checkpoint(path)
        self._shape().check_saved(ckpt.get("mesh"), path)
        return ckpt


def _size(strategy: ModelParallel, arg: str, value: Any) -> Size:
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    raise bad_value(f"{type(strategy).__name__}({arg})", value, '"auto" or an int >= 1')
