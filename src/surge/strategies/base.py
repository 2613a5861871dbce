"""The Strategy interface: processes, module wrapping, collectives and checkpoint I/O."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from ..checkpoint import link_atomic
from ..checkpoint.layout import check_layout
from ..checkpoint.model_state import apply_model_state, bare_state_dict
from ..checkpoint.shard_files import is_sharded
from ..checkpoint.writer import CheckpointWriter
from ..errors import CheckpointError
from ..metrics.results import Reducer
from ..rank_zero import warn

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from ..accelerators import Accelerator
    from ..config.semantics import Semantics
    from ..launch.environment import ClusterEnvironment
    from .pipeline_stages import Bubble


@dataclass(frozen=True, kw_only=True)
class Layout:
    """What a strategy is asked to run on: the Trainer's devices and nodes, and the launch environment."""

    accelerator: Accelerator
    devices: list[int]  # this node's device indices, resolved
    requested_devices: Any  # `devices=` as the user gave it (for messages)
    processes_per_node: int
    num_nodes: int
    env: ClusterEnvironment

    @property
    def processes(self) -> int:
        return self.processes_per_node * self.num_nodes


class Strategy:
    """One process, one device. Distributed strategies override what differs.

    A subclass registers its name with `surge.strategies.register_strategy` to be chosen by
    `strategy="..."`, or is passed as an object, `Trainer(strategy=MyStrategy())`.
    """

    name = "single"
    syncs_late = True  # gradients skipped under no_sync can be averaged by average_gradients()
    inference_mode_safe = True  # evaluation may run under torch.inference_mode
    _layout: Layout | None = None  # what the Trainer asked for (attach_layout)
    wrapped: nn.Module | None = None  # the wrapper steps run through (DDP, FSDP), if any
    activation_checkpointing_policy: Any = None  # what to checkpoint, when the strategy decides it
    device_mesh: Any = None  # the DeviceMesh a mesh strategy built (`Module.device_mesh`); None: none
    checkpoint_io: Any = None  # Lightning's checkpoint I/O plugin, when one was given
    _precision_plugin: Any = None
    reseeds_ranks = False  # the Lightning mode's: each stage's set-up re-seeds every rank
    # the stage whose module was set up last: "fit", "validate", "test", "predict"
    stage_set_up: str | None = None
    uncounted_flops: str | None = None  # why the first step's FLOPs cannot be counted here (None: they can)

    def __init__(self) -> None:
        self.device = torch.device("cpu")
        self.module: nn.Module | None = None

    @classmethod
    def from_layout(cls, layout: Layout) -> Strategy:
        """The strategy for its registered name on `layout`, after checking it can run there."""
        strategy = cls()
        strategy.check_layout(layout)
        return strategy

    def check_layout(self, layout: Layout) -> None:
        """Check (and plan for) the devices, nodes and environment; also run for a user's object."""

    def check_settings(self, **settings: Any) -> None:
        """Refuse, by name, a Trainer setting this strategy cannot honour (None or False: not set)."""

    def attach_layout(self, layout: Layout) -> None:
        """Keep the checked layout: what the root device, the parallel devices and the node count report."""
        self._layout = layout

    @property
    def stage_launcher(self) -> Any:
        """What starts the ranks of each stage from inside it (spawn, fork), or None: this process
        runs the stage itself."""
        return None

    # -- ranks -----------------------------------------------------------------------------
    global_rank = 0
    local_rank = 0
    node_rank = 0
    world_size = 1

    @property
    def data_parallel_size(self) -> int:
        """The processes that read batches of their own (a mesh's tensor-parallel ranks share one)."""
        return self.world_size

    @property
    def is_global_zero(self) -> bool:
        return self.global_rank == 0

    # -- Lightning's public members (surge's API has them too) -------------------------------
    @property
    def parallel_devices(self) -> list[torch.device]:
        """This node's devices, one per process (the same device repeated on the CPU)."""
        return [self.device] if self._layout is None else layout_devices(self._layout)

    @property
    def root_device(self) -> torch.device:
        """This process's device (known from the Trainer's arguments, before any stage)."""
        devices = self.parallel_devices
        return devices[self.local_rank] if self.local_rank < len(devices) else self.device

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int] | None:
        """How loaders are shared among processes (`num_replicas`, `rank`); None: not shared."""
        return None

    @property
    def num_nodes(self) -> int:
        return self._layout.num_nodes if self._layout is not None else 1

    @property
    def num_processes(self) -> int:
        """Processes on this node."""
        return self._layout.processes_per_node if self._layout is not None else 1

    @property
    def accelerator(self) -> Accelerator | None:
        return self._layout.accelerator if self._layout is not None else None

    @property
    def lightning_module(self) -> nn.Module | None:
        """The user's module, unwrapped (once a stage has set it up)."""
        return self.module

    @property
    def model(self) -> nn.Module | None:
        """What the steps run through: the wrapper (DDP's, FSDP's) when there is one, else the module."""
        return self.wrapped if self.wrapped is not None else self.module

    @property
    def precision_plugin(self) -> Any:
        """The precision the Trainer connected."""
        return self._precision_plugin

    @precision_plugin.setter
    def precision_plugin(self, precision: Any) -> None:
        self._precision_plugin = precision

    def reduce(self, tensor: Any, group: Any = None, reduce_op: Any = "mean") -> Any:
        """Lightning's reduce: one process, so the value as it is."""
        return tensor

    def all_gather(self, tensor: Tensor, group: Any = None, sync_grads: bool = False) -> Tensor:
        """Lightning's all_gather: one process, so the tensor as it is."""
        return tensor

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        """`all` (else `any`) of every process's `decision`; one process: the decision."""
        return decision

    @property
    def reducer(self) -> Reducer | None:
        """Collectives for metric reduction, or None when there is one process."""
        return None

    # -- set-up ----------------------------------------------------------------------------
    def evaluation_mode(self, inference_mode: bool) -> Callable[[], AbstractContextManager[Any]]:
        """What evaluation runs under: `torch.inference_mode` when asked and this strategy allows it."""
        return torch.inference_mode if inference_mode and self.inference_mode_safe else torch.no_grad

    def connect_precision(self, precision: Any) -> None:
        """Learn the precision plugin (a strategy that shards may need to adapt it)."""
        self._precision_plugin = precision

    def connect_semantics(self, semantics: Semantics) -> None:
        """Learn whose behaviour the run follows (the Lightning mode re-seeds ranks at each stage's set-up)."""
        self.reseeds_ranks = semantics.reseeds_ranks

    def connect_stage(self, stage: str) -> None:
        """Learn the stage whose module `setup_module` sets up next (DDP validates through its
        forward only inside fit, as Lightning, which wraps the module only to fit)."""
        self.stage_set_up = stage

    def setup_environment(self, device: torch.device) -> None:
        """Start or join the process group (nothing to do for one process)."""
        self.device = device

    def setup_module(self, module: nn.Module) -> nn.Module:
        """Place the module on the device, once; returns the object the step runs through."""
        self.module = module
        if not _spans_devices(module):
            module.to(self.device)
        return module

    def step_fn(self, module: nn.Module, hook: str) -> Callable[..., Any]:
        """The callable that runs `hook` (e.g. "training_step") through any wrapper."""
        return getattr(module, hook)

    def micro_batches(
        self, step: Callable[..., Any], window: int, batches: float, loader: Any
    ) -> Callable[..., Any]:
        """What the fit loop runs per batch in an epoch of `batches` batches from `loader` and
        accumulation windows of `window`, asked once per epoch: `step` itself here; a pipeline runs a
        window's micro-batches together through its schedule."""
        return step

    def no_sync(self) -> contextlib.AbstractContextManager:
        """Skip gradient synchronisation (non-final micro-batches); nothing to skip here."""
        return contextlib.nullcontext()

    def prepare_manual_backward(self, loss: Tensor) -> None:
        """Before each `manual_backward` (a step may run several backwards); nothing to prepare here."""

    # -- collectives -----------------------------------------------------------------------
    def barrier(self, name: str | None = None) -> None:
        """Wait for every process (a name only labels it)."""

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        return obj

    def all_reduce(self, tensor: Tensor, op: str = "sum") -> Tensor:
        return tensor

    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every process's `obj`, by rank."""
        return [obj]

    def average_gradients(self, module: nn.Module) -> None:
        """Average `.grad` over processes by hand (after micro-batches that skipped the sync)."""

    def reduce_bool(self, flag: bool) -> bool:
        """True if `flag` is True on any process (stop decisions agree everywhere)."""
        return flag

    # -- checkpoints -----------------------------------------------------------------------
    def model_state_dict(self, module: nn.Module) -> dict[str, Any]:
        return bare_state_dict(module)

    def optimizer_states(self, module: nn.Module, optimizers: list[Optimizer]) -> list[dict[str, Any]]:
        return [opt.state_dict() for opt in optimizers]

    def full_model_state(self, module: nn.Module) -> dict[str, Any]:
        """The whole model's bare weights, on rank zero at least (to write them out); a collective
        where the weights are sharded (every process calls it)."""
        return bare_state_dict(module)

    checkpoint_writer: CheckpointWriter = CheckpointWriter()  # at once; `async_checkpoint=True` sets another

    def use_checkpoint_writer(self, writer: CheckpointWriter) -> None:
        """Write checkpoints with `writer` (a background one for `async_checkpoint=True`)."""
        self.checkpoint_writer = writer

    def save_checkpoint(self, state: dict[str, Any], path: str | Path) -> None:
        writer = self.checkpoint_writer
        if self.is_global_zero:
            writer.save(state, path)
        if not writer.asynchronous:  # a background write is awaited in finish_checkpoints instead
            self.barrier("save_checkpoint")

    def link_checkpoint(self, source: Path, target: Path, symbolic: bool = False) -> bool:
        """Make `target` a copy of the checkpoint `source` (rank zero), once `source` is durable; with
        `symbolic`, a relative symlink to it. False (nothing done) for a copy its writer cannot link."""
        if not (symbolic or self.checkpoint_writer.links):
            return False
        if self.is_global_zero:
            self.checkpoint_writer.then(lambda: link_atomic(source, target, symbolic))
        return True

    def check_checkpoints(self) -> None:
        """Raise the error of a background write that failed (no sync: an attribute read)."""
        self.checkpoint_writer.check()

    def finish_checkpoints(self, leaving: BaseException | None = None) -> None:
        """Wait for a background write (every rank, once rank zero's file is durable). Its error is
        raised, or, while another error (`leaving`) ends the stage, added to that one as a note."""
        writer = self.checkpoint_writer
        if not writer.asynchronous:
            return
        try:
            writer.wait()
        except BaseException as err:
            if leaving is None:
                raise
            note = f"also, a checkpoint written in the background failed: {err}"
            if hasattr(leaving, "add_note"):  # Python >= 3.11
                leaving.add_note(note)
            warn(note)
            return
        if leaving is None:
            self.barrier("finish_checkpoints")

    def load_checkpoint(self, path: str | Path) -> dict[str, Any]:
        """Read and verify a checkpoint (a sharded one's shard files too) before any state is used."""
        ckpt = self.checkpoint_writer.load(path)
        check_layout(ckpt, path)
        if is_sharded(ckpt):
            problems = self._shard_problems(ckpt, path)
            if problems:
                raise CheckpointError(f"checkpoint {path} cannot be used: " + "; ".join(problems))
        return ckpt

    def _shard_problems(self, ckpt: dict[str, Any], path: str | Path) -> list[str]:
        from ..checkpoint.shard_files import verify_shards

        return verify_shards(ckpt, path)

    def restore_model(
        self, module: nn.Module, ckpt: Mapping[str, Any], path: str | Path, strict: bool = True
    ) -> list[str]:
        """Load the checkpoint's weights into the module; returns what did not match (strict: raises)."""
        if is_sharded(ckpt):
            from ..checkpoint.sharded import full_model_state

            state = full_model_state(ckpt, path)
        else:
            state = ckpt["state_dict"]
        return apply_model_state(module, state, strict=strict, source=str(path))

    def restore_optimizers(
        self, module: nn.Module, optimizers: list[Optimizer], ckpt: Mapping[str, Any], path: str | Path
    ) -> None:
        if not is_sharded(ckpt):
            for opt, saved in zip(optimizers, ckpt["optimizer_states"]):
                opt.load_state_dict(saved)
            return
        # Sharded optimizer state is keyed by parameter name, so it loads into any layout.
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

        from ..checkpoint.sharded import check_optimizer_kinds, load_into

        check_optimizer_kinds(optimizers, ckpt, path)
        templates = [get_optimizer_state_dict(module, opt) for opt in optimizers]
        load_into({"optimizer_states": templates}, ckpt, path, partial=True)
        for opt, loaded in zip(optimizers, templates):
            set_optimizer_state_dict(module, opt, loaded)

    def window_gradients(self, module: nn.Module) -> Any:
        """The gradients accumulated so far in an unfinished accumulation window, by parameter name
        (a checkpoint written between micro-batches carries them, so the window continues exactly)."""
        mine = {name: p.grad.detach().cpu() for name, p in module.named_parameters() if p.grad is not None}
        return {"per_rank": self.all_gather_object(mine)}  # each rank's own, unsynchronised ones

    def restore_window_gradients(self, module: nn.Module, saved: Any, path: str | Path) -> None:
        """Put back what `window_gradients` saved."""
        _set_gradients(module, rank_share(saved, self.global_rank, self.world_size, path), path)

    def remove_checkpoint(self, path: str | Path) -> None:
        """Delete a checkpoint this run wrote (rank zero), with its shards if it has any."""
        if self.is_global_zero:
            writer = self.checkpoint_writer
            writer.then(lambda: writer.remove(path))

    def explain_failure(self, err: BaseException) -> None:
        """Add what the strategy knows about why the run failed (e.g. a collective timeout)."""

    def dump_hangs_to(self, directory: Path) -> None:
        """Where each rank writes its stacks when a collective hangs (multi-process strategies)."""

    def forward_modules(self, module: nn.Module) -> list[nn.Module]:
        """The modules whose calls run `module`'s forward in training once it is set up (what
        compile=True compiles): the module itself, unless the strategy calls parts of it instead."""
        return [module]

    def pipeline_bubble(self) -> Bubble | None:
        """With pipeline stages, the idle share of their latest schedule run (the doctor's); else None."""
        return None

    def speed_advice(self) -> str | None:
        """A known cost of this strategy and what is faster, for the doctor's findings; None: nothing."""
        return None

    def wrap_gradient_allreduce(self, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> bool:
        """Run the gradient all-reduce as `wrap(default_hook)` (DDP's comm-hook signature), e.g. to time
        it; False when this strategy has no such all-reduce."""
        return False

    def teardown(self, failed: bool = False) -> None:
        """Release processes and devices (`failed`: the run raised; don't wait for peers)."""


def layout_devices(layout: Layout) -> list[torch.device]:
    """A node's devices, one per process: the CPU repeated, or the accelerator's chosen indices."""
    if layout.accelerator.name == "cpu":
        return [torch.device("cpu")] * layout.processes_per_node
    return [layout.accelerator.device(i) for i in layout.devices]


def _spans_devices(module: nn.Module) -> bool:
    """True when the user already placed parameters on more than one device (model parallelism)."""
    devices = {p.device for p in module.parameters()}
    return len(devices) > 1


def rank_share(saved: Any, rank: int, world_size: int, path: str | Path) -> Any:
    """This rank's part of gradients saved by `world_size` processes (one process saves a plain dict)."""
    ranks = saved.get("per_rank", [saved]) if isinstance(saved, dict) else None
    if not isinstance(ranks, list) or len(ranks) != world_size:
        count = len(ranks) if isinstance(ranks, list) else "an unknown number of"
        raise CheckpointError(
            f"{path} was written inside a gradient accumulation window by {count} process(es); it resumes "
            f"exactly only on as many, not {world_size}. Resume from a checkpoint written at an optimizer step "
            "(ModelCheckpoint writes those), or with the same number of processes."
        )
    return ranks[rank]


def _set_gradients(module: nn.Module, grads: dict[str, Tensor], path: str | Path) -> None:
    params = dict(module.named_parameters())
    unknown = sorted(set(grads) - set(params)) if isinstance(grads, dict) else ["(not a dict)"]
    if unknown:
        raise CheckpointError(
            f"{path}: the accumulation window's gradients name parameters this model lacks: {unknown[:5]}"
        )
    for name, grad in grads.items():
        param = params[name]
        if grad.shape != param.shape:
            raise CheckpointError(
                f"{path}: the saved gradient of {name} has shape {tuple(grad.shape)}, the parameter {tuple(param.shape)}"
            )
        param.grad = grad.to(device=param.device, dtype=param.dtype)
