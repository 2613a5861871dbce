"""Fully sharded data parallel (FSDP2, `torch.distributed.fsdp.fully_shard`).

Parameters, gradients and optimizer state are sharded over the processes; each sharded unit
all-gathers its parameters just before it runs and frees them after. Units are chosen by a
policy: module classes (e.g. the transformer block) or a parameter-count threshold. The root
module's own parameters form the root unit, held by a small wrapper of surge's whose forward runs
one of the user's step methods (`training_step`, ...), so FSDP gathers them around every step as it
would around `forward`, with nothing set on the user's module (Lightning's FSDP wraps the same way).
What FSDP does by its nature stays: each unit's class becomes `FSDP<Class>`, parameters become
DTensors (this rank's shard), FSDP's hooks and state are added to the units; the model is returned
sharded (docs/reliability.md).

Checkpoints are sharded (`torch.distributed.checkpoint`, see `surge.checkpoint.sharded`): every rank writes
its part, and they load on any world size, or on one process as a plain state dict.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from torch import nn
from torch.optim import Optimizer

from ..checkpoint.model_state import clean_state_dict
from ..checkpoint.shard_files import is_sharded
from ..config.registry import register_strategy
from ..errors import CheckpointError, MisconfigurationError, SurgeTypeError
from ..precision import Precision
from .base import _spans_devices
from .parallel import ProcessGroupStrategy


class _Steps(nn.Module):
    """FSDP's root: holds the user's module and runs one of its step methods as its forward."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, hook: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.module, hook)(*args, **kwargs)


def _fsdp() -> Any:
    fsdp: Any
    try:
        fsdp = importlib.import_module("torch.distributed.fsdp")
    except ImportError:  # pragma: no cover - torch without distributed
        fsdp = None
    if fsdp is None or not hasattr(fsdp, "fully_shard"):
        fsdp = importlib.import_module("torch.distributed._composable.fsdp")  # torch 2.4 and 2.5
    return fsdp


@register_strategy("fsdp")
class FSDPStrategy(ProcessGroupStrategy):
    """Shard the model over `world_size` processes with FSDP2.

    `shard`: the sub-modules that become their own sharded unit: a set of module classes, or an
    int, the least number of parameters a sub-module (not counting those already in a smaller
    unit) must hold. None: only the root is a unit (all parameters gathered at once: simplest,
    least memory saved). `reshard_after_forward=False` keeps gathered parameters until backward
    (ZeRO-2-like: more memory, less communication). `cpu_offload` keeps shards in host memory.
    """

    name = "fsdp"
    syncs_late = False  # gradients skipped under no_sync cannot be reduced after the fact
    # Parameters gathered under inference_mode become inference tensors that training cannot update
    # in place (a resume that validates before its first step): evaluation runs under no_grad.
    inference_mode_safe = False

    def __init__(
        self,
        *,
        shard: Iterable[type[nn.Module]] | int | None = None,
        reshard_after_forward: bool = True,
        cpu_offload: bool = False,
        timeout: datetime.timedelta | float = datetime.timedelta(minutes=30),
        process_group_backend: str | None = None,
    ) -> None:
        super().__init__(timeout=timeout, process_group_backend=process_group_backend)
        self._side_group: SideGroup | None = None  # async_checkpoint's collectives, made at its first save
        self.shard_classes: tuple[type[nn.Module], ...] = ()
        self.shard_min_params: int | None = None
        if isinstance(shard, bool) or (isinstance(shard, int) and shard < 1):
            raise MisconfigurationError(
                f"FSDPStrategy(shard={shard!r}) is not valid: give module classes or a parameter count >= 1."
            )
        if isinstance(shard, int):
            self.shard_min_params = shard
        elif shard is not None:
            classes = tuple(shard)
            bad = [c for c in classes if not (isinstance(c, type) and issubclass(c, nn.Module))]
            if bad:
                raise SurgeTypeError(
                    f"FSDPStrategy(shard=...) takes nn.Module subclasses or an int; got {bad!r}."
                )
            self.shard_classes = classes
        self.reshard_after_forward = reshard_after_forward
        self.cpu_offload = cpu_offload
        self.offload_params = (
            cpu_offload  # what sharding reads (Lightning's `cpu_offload` is torch's CPUOffload)
        )
        self.precision: Precision | None = None

    def connect_precision(self, precision: Precision) -> None:
        """Mixed precision runs through FSDP's policy (16-bit gathers, fp32 gradient reduction);
        fp16's loss scaler must agree across shards on skipped steps."""
        super().connect_precision(precision)
        self.precision = precision
        precision.shard_loss_scaling()

    # -- set-up ----------------------------------------------------------------------------
    def setup_module(self, module: nn.Module) -> nn.Module:
        if _spans_devices(module):
            raise MisconfigurationError(
                "strategy='fsdp' shards a model that lives on one device per process; this model spans "
                "several devices already. Use strategy='ddp' for model-parallel layouts."
            )
        if isinstance(self.wrapped, _Steps) and self.wrapped.module is module:
            return module  # sharded by an earlier stage of this Trainer: sharded once
        self.module = module
        module.to(self.device)
        fsdp = _fsdp()
        options = self._shard_options(fsdp)
        for unit in self._units(module):
            fsdp.fully_shard(unit, **options)
        self.wrapped = fsdp.fully_shard(_Steps(module), **options)
        return module

    def step_fn(self, module: nn.Module, hook: str) -> Callable[..., Any]:
        """`hook` run through FSDP's root (its parameters gathered around it)."""
        if isinstance(self.wrapped, _Steps) and self.wrapped.module is module:
            return functools.partial(self.wrapped, hook)
        return getattr(module, hook)

    def _shard_options(self, fsdp: Any) -> dict[str, Any]:
        options: dict[str, Any] = {"reshard_after_forward": self.reshard_after_forward}
        dtypes = self.precision.sharded_dtypes() if self.precision is not None else None
        if dtypes is not None:
            options["mp_policy"] = fsdp.MixedPrecisionPolicy(param_dtype=dtypes[0], reduce_dtype=dtypes[1])
        if self.offload_params:
            options["offload_policy"] = fsdp.CPUOffloadPolicy()
        return options

    def _units(self, root: nn.Module) -> list[nn.Module]:
        """Sub-modules to shard on their own, innermost first (fully_shard must go bottom-up)."""
        units: list[nn.Module] = []
        claimed: set[int] = set()  # parameters already in a smaller unit

        def visit(module: nn.Module) -> None:
            for child in module.children():
                visit(child)
            if module is root:
                return
            if self.shard_classes and isinstance(module, self.shard_classes):
                units.append(module)
                claimed.update(id(p) for p in module.parameters())
            elif self.shard_min_params is not None:
                own = sum(p.numel() for p in module.parameters() if id(p) not in claimed)
                if own >= self.shard_min_params:
                    units.append(module)
                    claimed.update(id(p) for p in module.parameters())

        visit(root)
        return units

    def no_sync(self) -> contextlib.AbstractContextManager:
        return self._gradient_sync_off()

    @contextlib.contextmanager
    def _gradient_sync_off(self) -> Iterator[None]:
        module: Any = self.wrapped  # fully_shard made it an FSDPModule (its class is swapped at run time)
        module.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            module.set_requires_gradient_sync(True)

    # -- checkpoints -----------------------------------------------------------------------
    def model_state_dict(self, module: nn.Module) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return get_model_state_dict(module)  # this rank's shards, keyed by parameter name

    def full_model_state(self, module: nn.Module) -> dict[str, Any]:
        """Every shard gathered into whole CPU tensors on rank zero (a collective; other ranks get {})."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def optimizer_states(self, module: nn.Module, optimizers: list[Optimizer]) -> list[dict[str, Any]]:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        return [get_optimizer_state_dict(module, opt) for opt in optimizers]

    def window_gradients(self, module: nn.Module) -> Any:
        """None: FSDP accumulates an unfinished window's gradients unsharded, inside its own state."""
        return None

    def save_checkpoint(self, state: dict[str, Any], path: str | Path) -> None:
        from ..checkpoint.sharded import save_sharded

        writer = self.checkpoint_writer
        if not writer.asynchronous:
            save_sharded(
                state, path, rank=self.global_rank, world_size=self.world_size, broadcast=self.broadcast,
                gather=self.all_gather_object, barrier=self.barrier,
            )  # fmt: skip
            return
        # Every rank writes its shards in its writer's thread, with the collectives of the save (DCP's
        # plan, the shard digests, the commit) on a gloo group of their own: training's go on meanwhile.
        side = SideGroup.of(self)
        rank, size = self.global_rank, self.world_size

        def write(snapshot: dict[str, Any], target: Path) -> Path:
            return save_sharded(
                snapshot, target, rank=rank, world_size=size, broadcast=side.broadcast,
                gather=side.all_gather_object, barrier=side.barrier, group=side.group,
            )  # fmt: skip

        writer.save(state, path, write=write)

    def restore_model(
        self, module: nn.Module, ckpt: Mapping[str, Any], path: str | Path, strict: bool = True
    ) -> list[str]:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            set_model_state_dict,
        )

        template = get_model_state_dict(module)
        if is_sharded(ckpt):
            from ..checkpoint.sharded import load_into, saved_model_shapes

            problems, keep = _compare(template, saved_model_shapes(ckpt, path), strict, path, module)
            box = {"state_dict": {k: v for k, v in template.items() if k in keep}}
            load_into(box, ckpt, path, partial=True)
            set_model_state_dict(module, box["state_dict"], options=StateDictOptions(strict=False))
            return problems
        # A whole state dict (one process or DDP): every rank read it, and takes its own shards.
        full = clean_state_dict(ckpt["state_dict"])
        problems, keep = _compare(
            template, {k: tuple(v.shape) for k, v in full.items()}, strict, path, module
        )
        set_model_state_dict(
            module,
            {k: v for k, v in full.items() if k in keep},
            options=StateDictOptions(full_state_dict=True, strict=False),
        )
        return problems

    def restore_optimizers(
        self, module: nn.Module, optimizers: list[Optimizer], ckpt: Mapping[str, Any], path: str | Path
    ) -> None:
        if is_sharded(ckpt):
            super().restore_optimizers(module, optimizers, ckpt, path)
            return
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        names = {id(p): name for name, p in module.named_parameters()}
        for opt, saved in zip(optimizers, ckpt["optimizer_states"]):
            by_name = _native_to_named(saved, opt, names, path)
            set_optimizer_state_dict(module, opt, by_name, options=StateDictOptions(full_state_dict=True))


def _compare(
    model: dict[str, Any],
    saved: dict[str, tuple[int, ...]],
    strict: bool,
    path: str | Path,
    module: nn.Module,
) -> tuple[list[str], set[str]]:
    """What differs between the model's keys and shapes and the checkpoint's, and the keys to load."""
    missing = [k for k in model if k not in saved]
    unexpected = [k for k in saved if k not in model]
    shapes = [
        f"{k}: checkpoint {saved[k]} vs model {tuple(v.shape)}"
        for k, v in model.items()
        if k in saved and tuple(v.shape) != saved[k]
    ]
    problems = [f"missing keys: {missing}"] * bool(missing) + [f"unexpected keys: {unexpected}"] * bool(
        unexpected
    )
    problems += [f"shape mismatches: {shapes}"] * bool(shapes)
    name = type(module).__name__.removeprefix("FSDP")
    if problems and strict:
        raise CheckpointError(f"checkpoint {path} does not match {name}: " + "; ".join(problems))
    mismatched = {s.split(":")[0] for s in shapes}
    return problems, {k for k in model if k in saved and k not in mismatched}


def _native_to_named(
    saved: dict[str, Any], opt: Optimizer, names: dict[int, str], path: str | Path
) -> dict[str, Any]:
    """A plain `optimizer.state_dict()` (parameters by position) keyed by parameter name instead."""
    order = [names.get(id(p)) for group in opt.param_groups for p in group["params"]]
    saved_ids = [i for group in saved["param_groups"] for i in group["params"]]
    if None in order or len(saved_ids) != len(order):
        raise CheckpointError(
            f"the optimizer state in {path} covers {len(saved_ids)} parameters, but the optimizer here has "
            f"{len(order)}; configure_optimizers() must build the same optimizers to resume"
        )
    to_name = dict(zip(saved_ids, order))
    return {
        "state": {to_name[i]: s for i, s in saved["state"].items()},
        "param_groups": [{**g, "params": [to_name[i] for i in g["params"]]} for g in saved["param_groups"]],
    }


class SideGroup:
    """A gloo process group for background checkpoint writes, made once per process group (a
    collective: every rank makes it at the same save)."""

    def __init__(self, timeout: datetime.timedelta) -> None:
        import torch.distributed as dist

        self.world = dist.group.WORLD  # held: the group this one was made beside
        self.group = dist.new_group(backend="gloo", timeout=timeout)

    @classmethod
    def of(cls, strategy: FSDPStrategy) -> SideGroup:
        import torch.distributed as dist

        side = strategy._side_group
        if side is None or side.world is not dist.group.WORLD:  # none yet, or made beside an ended group
            side = strategy._side_group = cls(strategy.timeout)
        return side

    def broadcast(self, obj: Any) -> Any:
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def all_gather_object(self, obj: Any) -> list[Any]:
        import torch.distributed as dist

        out: list[Any] = [None] * dist.get_world_size(self.group)
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier(group=self.group)


@register_strategy("fsdp_cpu_offload")
class FSDPOffloadStrategy(FSDPStrategy):
    """Lightning's `strategy="fsdp_cpu_offload"`: FSDP with the shards kept in host memory."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{"cpu_offload": True, **kwargs})
