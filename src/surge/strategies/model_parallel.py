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
reset_parameters(), as Lightning does. Checkpoints are surge's sharded ones (DCP): they resume on the
same mesh exactly, and on another mesh, FSDP or one process resharded (mesh_resume.py); with stages,
on the same pipeline layout only.

With `pipeline_parallel=N` the mesh gains an outer `"pipeline_parallel"` dimension: the model's
layers are split into stages (pipeline_stages.py), each stage sharded over its data-parallel group,
and each accumulation window runs as micro-batches through the chosen schedule (pipeline_run.py);
metrics come from the last stage (pipeline_metrics.py), clipping takes the norm over every stage.

`compile=` and `activation_checkpointing=` take the model as the plan left it: the checkpointed
blocks are chosen before sharding, the compiled calls installed on the sharded blocks (dynamo runs
FSDP's hooks eagerly), and with stages `compile=True` compiles each stage's forward
(`forward_modules`); the doctor reads the pipeline's bubble from `pipeline_bubble()`.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import torch.distributed as dist
from torch import nn
from torch.optim import Optimizer

from ..errors import MisconfigurationError, SurgeRuntimeError, bad_value
from ..rank_zero import info
from .base import Layout
from .fsdp import FSDPStrategy, _fsdp, _Steps
from .materialize import is_meta, materialize
from .mesh import DATA, PIPE, GroupReducer, MeshShape
from .mesh_checks import check_data_parallel, check_plan_divides, check_tensor_parallel_applied
from .mesh_resume import MESH, layout_errors, say_if_moved
from .pipeline_checkpoint import (
    check_pipeline_saved,
    layout_record,
    restore_stage_optimizers,
    stage_model_problems,
    stage_optimizer_states,
)
from .pipeline_metrics import PipelineReducer
from .pipeline_run import PipelineRun
from .pipeline_stages import Bubble, PipelineLayout, build_stages
from .replica_batches import checked_first, fingerprint, mismatch_error, replica_mismatches

Size = int | Literal["auto"]


class ModelParallel(FSDPStrategy):
    """Tensor parallel x FSDP2 on a `data_parallel` x `tensor_parallel` mesh of processes, and
    optionally `pipeline_parallel` stages in front of them.

    `"auto"` sizes are Lightning's: `tensor_parallel` = the processes of one node, `data_parallel`
    = the number of nodes; with pipeline stages, `tensor_parallel="auto"` is 1 and `data_parallel="auto"`
    the processes left. shard, reshard_after_forward and cpu_offload are `FSDPStrategy`'s, for the
    units surge shards itself. `pipeline_parallel > 1` splits the module's `pipeline_layers()`
    (an nn.Sequential, balanced by layer count) or takes its `pipeline_stages(...)` into
    `pipeline_parallel x stages_per_rank` stages, run by `pipeline_schedule` ("GPipe", "1F1B" or
    "Interleaved1F1B"; stages_per_rank defaults to 1, or 2 for Interleaved1F1B) over the
    `accumulate_grad_batches` micro-batches of each optimizer step, with `pipeline_loss(output,
    target)` as the last stage's loss (docs/distributed.md, "Pipeline parallelism").
    """

    name = "model_parallel"
    sizes = ("data_parallel", "tensor_parallel")  # the constructor's names for the two sizes

    def __init__(
        self,
        *,
        data_parallel: Size = "auto",
        tensor_parallel: Size = "auto",
        pipeline_parallel: int = 1,
        pipeline_schedule: str = "1F1B",
        stages_per_rank: int | None = None,
        shard: Any = None,
        reshard_after_forward: bool = True,
        cpu_offload: bool = False,
        timeout: datetime.timedelta | float = datetime.timedelta(minutes=30),
        process_group_backend: str | None = None,
    ) -> None:
        owner = type(self).__name__
        if (
            isinstance(pipeline_parallel, bool)
            or not isinstance(pipeline_parallel, int)
            or pipeline_parallel < 1
        ):
            raise bad_value(f"{owner}(pipeline_parallel)", pipeline_parallel, "an int >= 1")
        self.pipeline = (
            PipelineLayout.of(owner, pipeline_parallel, pipeline_schedule, stages_per_rank)
            if pipeline_parallel > 1
            else None
        )
        self._run: PipelineRun | None = None  # this rank's stages and schedules (setup_module)
        self.pipeline_split: str | None = None  # the stages' layers, as shown when they were made
        self._stage_modules: list[nn.Module] = []  # this rank's stage modules (what the schedule calls)
        super().__init__(
            shard=shard, reshard_after_forward=reshard_after_forward, cpu_offload=cpu_offload,
            timeout=timeout, process_group_backend=process_group_backend,
        )  # fmt: skip
        self._asked = (_size(self, self.sizes[0], data_parallel), _size(self, self.sizes[1], tensor_parallel))
        self.shape: MeshShape | None = None  # known once the layout is (check_layout)
        self._mesh: Any = None
        self._mesh_world: Any = None  # the default group the mesh was built in
        self._reducer = (
            GroupReducer(self._data_parallel_group)
            if self.pipeline is None
            else PipelineReducer(self._data_parallel_group, self._last_stage_rank)
        )

    # -- the mesh --------------------------------------------------------------------------
    def check_layout(self, layout: Layout) -> None:
        super().check_layout(layout)
        dp, tp = self._asked
        pp = self.pipeline.pipeline_parallel if self.pipeline is not None else 1
        if pp > 1:  # "auto" with stages: no tensor parallel, data parallel over what is left
            tp = 1 if tp == "auto" else tp
            dp = max(1, layout.processes // (pp * tp)) if dp == "auto" else dp
        self.shape = MeshShape(
            layout.num_nodes if dp == "auto" else dp,
            layout.processes_per_node if tp == "auto" else tp,
            owner=type(self).__name__,
            pipeline_parallel=pp,
        )
        asked = f"Trainer(devices={layout.requested_devices!r}, num_nodes={layout.num_nodes})"
        self.shape.check_world(layout.processes, self.sizes, asked)

    def check_settings(self, **settings: Any) -> None:
        """`compile=` and `activation_checkpointing=` apply to the blocks after the tensor-parallel plan
        (configure_model) and before sharding; only compile="step" through pipeline stages is refused."""
        spec = settings.get("compile")
        if self.pipeline is not None and getattr(spec, "scope", None) == "step":
            raise MisconfigurationError(
                f"Trainer(compile='step') with {type(self).__name__}(pipeline_parallel="
                f"{self.pipeline.pipeline_parallel}) is not supported: the pipeline's schedule runs each "
                "micro-batch's forward, backward and the sends between stages itself, so there is no one "
                "training step to compile. Use compile=True (each stage's forward) or compile='regions'."
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

    def _last_stage_rank(self) -> int:
        """The global rank of the last pipeline stage's first rank (where reported metrics come from)."""
        shape = self._shape()
        return (shape.pipeline_parallel - 1) * shape.data_parallel * shape.tensor_parallel

    @property
    def pipeline_rank(self) -> int:
        """This rank's place along the pipeline (0: it holds the first stage)."""
        shape = self._shape()
        return self.global_rank // (shape.data_parallel * shape.tensor_parallel)

    @property
    def uncounted_flops(self) -> str | None:  # type: ignore[override]
        """With stages, the schedule's backward (autograd.grad towards each stage's inputs) cannot run
        inside torch's FLOP counter, whose module tracking hooks need a whole backward."""
        return "with pipeline stages" if self.pipeline is not None else None

    def connect_precision(self, precision: Any) -> None:
        if self.pipeline is not None and getattr(precision, "scaler", None) is not None:
            raise MisconfigurationError(
                f"{type(self).__name__}(pipeline_parallel={self.pipeline.pipeline_parallel}) with precision="
                "'16-mixed' is not supported: the pipeline's schedule runs the backward, past the loss "
                "scaler. Use precision='bf16-mixed' (no loss scaling) or 32."
            )
        super().connect_precision(precision)

    # -- the module ------------------------------------------------------------------------
    def setup_module(self, module: nn.Module) -> nn.Module:
        if isinstance(self.wrapped, _Steps) and self.wrapped.module is module:
            return module  # parallelized by an earlier stage of this Trainer: once
        if self.pipeline is not None:
            return self._setup_pipeline(module, self.pipeline)
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

    def _setup_pipeline(self, module: nn.Module, layout: PipelineLayout) -> nn.Module:
        """This rank's stages: split off, placed, sharded over the stage's data-parallel group, and
        wrapped as `PipelineStage`s that the schedules run."""
        if self._run is not None and self._run.module is module:
            return module
        from torch.distributed.pipelining import PipelineStage

        owner, shape = type(self).__name__, self._shape()
        check_tensor_parallel_applied(module, shape.tensor_parallel, owner)
        check_plan_divides(module, shape.tensor_parallel, owner)
        modules, self.pipeline_split = build_stages(module, layout, self.pipeline_rank)
        self._stage_modules = modules
        self.module = module
        if not is_meta(module):
            module.to(self.device)
        fsdp = _fsdp()
        options = self._shard_options(fsdp)
        for stage in modules:
            for unit in self._units(stage):
                if not isinstance(unit, fsdp.FSDPModule):
                    fsdp.fully_shard(unit, **options)
            fsdp.fully_shard(stage, **options)
        materialize(module, self.device)
        check_data_parallel(module, owner)
        group = self.device_mesh[PIPE].get_group()
        index = layout.stage_indices(self.pipeline_rank)
        stages = [
            PipelineStage(m, i, layout.num_stages, self.device, group=group) for m, i in zip(modules, index)
        ]
        self._run = PipelineRun(module, stages, layout, self.device)
        info(f"pipeline of {layout.num_stages} stages ({layout.schedule}): {self.pipeline_split}")
        return module

    def forward_modules(self, module: nn.Module) -> list[nn.Module]:
        """With pipeline stages, this rank's stage modules: the schedule calls them, never the module."""
        if self.pipeline is None or self._run is None or self._run.module is not module:
            return super().forward_modules(module)
        return list(self._stage_modules)

    def pipeline_bubble(self) -> Bubble | None:
        return self._run.bubble() if self._run is not None else None

    def step_fn(self, module: nn.Module, hook: str) -> Any:
        if self.pipeline is None:
            step = super().step_fn(module, hook)
            if hook == "training_step" or not self._replicas_span_ranks():  # (training: micro_batches)
                return step
            where = f"the first batch of this {hook.removesuffix('_step')} run"
            return checked_first(step, lambda batch: self._check_replica_batches(batch, where))
        if hook != "training_step":
            raise MisconfigurationError(
                f"{type(self).__name__}(pipeline_parallel={self.pipeline.pipeline_parallel}) trains only: "
                f"{hook} through pipeline stages is not built. Fit with limit_val_batches=0 (or no "
                "validation loader), and evaluate the saved checkpoint on one process."
            )
        return getattr(module, hook)  # not run: micro_batches runs the schedule instead

    def micro_batches(self, step: Any, window: int, batches: float, loader: Any) -> Any:
        if self._run is not None:
            step = self._run.for_windows(window, batches, loader)
        if not self._replicas_span_ranks():
            return step
        return checked_first(
            step, lambda batch: self._check_replica_batches(batch, "this epoch's first batch")
        )

    def _replicas_span_ranks(self) -> bool:
        """Whether a data-parallel replica spans several ranks (tensor-parallel or pipeline size > 1),
        which must then read the same batches; else every rank is a replica of its own."""
        shape = self._shape()
        return shape.size != shape.data_parallel

    def _check_replica_batches(self, batch: Any, where: str) -> None:
        """The ranks of each data-parallel replica hold the same batch (replica_batches.py)."""
        shape = self._shape()
        prints = self.all_gather_object(fingerprint(batch))
        pairs = replica_mismatches(prints, lambda rank: shape.sampler_kwargs(rank)["rank"])
        if pairs:
            roles = [f"{n} {what}" for n, what in ((shape.tensor_parallel, "tensor-parallel ranks"),
                                                  (shape.pipeline_parallel, "pipeline stages")) if n > 1]  # fmt: skip
            raise mismatch_error(type(self).__name__, pairs, " x ".join(roles), where)

    def no_sync(self) -> contextlib.AbstractContextManager:
        if self.pipeline is not None:
            return contextlib.nullcontext()  # the schedule syncs a window's gradients at its last backward
        return super().no_sync()

    def _shard_options(self, fsdp: Any) -> dict[str, Any]:
        return {**super()._shard_options(fsdp), "mesh": self.device_mesh[DATA]}

    # -- checkpoints: DCP shards that reshard onto any layout (mesh_resume.py) ---------------
    def _sizes(self) -> list[int]:
        shape = self._shape()
        return [shape.data_parallel, shape.tensor_parallel]  # what the checkpoint records (MESH)

    def save_checkpoint(self, state: dict[str, Any], path: str | Path) -> None:
        state = {**state, "pipeline": layout_record(self.pipeline)}  # (None without stages)
        super().save_checkpoint({**state, MESH: self._sizes()}, path)

    def load_checkpoint(self, path: str | Path) -> dict[str, Any]:
        ckpt = super().load_checkpoint(path)
        check_pipeline_saved(ckpt.get("pipeline"), layout_record(self.pipeline), path)
        say_if_moved(ckpt, self._sizes(), path)
        return ckpt

    def restore_model(
        self, module: nn.Module, ckpt: Mapping[str, Any], path: str | Path, strict: bool = True
    ) -> list[str]:
        if self.pipeline is None:
            with layout_errors(ckpt, self._sizes(), path):
                return super().restore_model(module, ckpt, path, strict)
        problems = stage_model_problems(module, ckpt, path, strict)  # this rank's stages only
        super().restore_model(module, ckpt, path, strict=False)
        return problems

    def full_model_state(self, module: nn.Module) -> dict[str, Any]:
        """With stages, each stage's layers gathered whole on its ranks and sent to rank zero, which
        holds the union (every stage's); without, FSDP's gather (a collective either way)."""
        if self.pipeline is None:
            return super().full_model_state(module)
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full: dict[str, Any] = get_model_state_dict(module, options=StateDictOptions(full_state_dict=True))
        shape = self._shape()
        first = self.global_rank % (shape.data_parallel * shape.tensor_parallel) == 0  # of its stage
        mine = {k: v.detach().cpu() for k, v in full.items()} if first else {}
        box: list[Any] = [None] * self.world_size if self.is_global_zero else []
        self._enter("gather_object")
        dist.gather_object(mine, box if self.is_global_zero else None, dst=0)
        self._leave()
        return {k: v for part in box for k, v in part.items()}

    def optimizer_states(self, module: nn.Module, optimizers: list[Any]) -> list[dict[str, Any]]:
        if self.pipeline is None:
            return super().optimizer_states(module, optimizers)
        return stage_optimizer_states(module, optimizers)

    def restore_optimizers(
        self, module: nn.Module, optimizers: list[Optimizer], ckpt: Mapping[str, Any], path: str | Path
    ) -> None:
        if self.pipeline is None:
            with layout_errors(ckpt, self._sizes(), path):
                return super().restore_optimizers(module, optimizers, ckpt, path)
        return restore_stage_optimizers(module, optimizers, ckpt, path)


def _size(strategy: ModelParallel, arg: str, value: Any) -> Size:
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    raise bad_value(f"{type(strategy).__name__}({arg})", value, '"auto" or an int >= 1')
