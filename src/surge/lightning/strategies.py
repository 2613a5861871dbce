"""Lightning's `lightning.pytorch.strategies` on surge's strategies: `DDPStrategy`, `FSDPStrategy`
and `SingleDeviceStrategy` are surge's, built from Lightning's constructor arguments (each argument
is mapped onto surge's own, or refused by name at construction); `Strategy` and `ParallelStrategy`
are surge's bases. Strategies surge has no engine for are importable and refused when built.
docs/lightning.md ("Strategies") lists what each argument maps to."""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Callable, Mapping
from typing import Any, ForwardRef, Literal, Union

import torch
from torch import nn
from torch.distributed.constants import default_pg_timeout

from ..arguments.plugins import resolve_plugins
from ..callbacks.base import overrides
from ..errors import MisconfigurationError, SurgeTypeError, bad_value
from ..module import Module
from ..strategies import ddp as _ddp
from ..strategies import model_parallel as _model_parallel
from ..strategies import single as _single
from ..strategies.base import Layout, Strategy, layout_devices
from ..strategies.parallel import ProcessGroupStrategy as ParallelStrategy
from . import init_context
from .fsdp_arguments import FSDPArguments

START_METHODS = ("popen", "spawn", "fork", "forkserver")
DDP_KWARGS = (
    "find_unused_parameters",
    "static_graph",
    "gradient_as_bucket_view",
    "bucket_cap_mb",
    "broadcast_buffers",
)


def check_start_method(owner: str, start_method: str) -> None:
    """`start_method`: "popen" (surge's launcher runs the script again per rank), "spawn", "fork" or
    "forkserver" (each stage starts the ranks from inside it; docs/distributed.md)."""
    if start_method not in START_METHODS:
        raise bad_value(f"{owner}(start_method)", start_method, f"one of {START_METHODS}")


def strategy_plugins(**plugins: Any) -> tuple[Any, ...]:
    """`cluster_environment`, `checkpoint_io`, `precision_plugin` handed to a strategy: the ones
    given, checked now (a wrong type fails here); the Trainer joins them with its own `plugins=`
    (arguments/lightning.py), refusing a kind given to both, as Lightning does."""
    given = tuple(value for value in plugins.values() if value is not None)
    resolve_plugins(list(given))
    return given


class _LightningArguments:
    """What Lightning's strategies share: the plugins kept as attributes (Lightning's public ones),
    `accelerator`/`parallel_devices` checked against the Trainer's devices when it is built."""

    cluster_environment: Any = None
    plugin_objects: tuple[Any, ...] = ()  # the plugins given to the strategy (`Trainer(plugins=)`'s partners)
    _given_accelerator: Any = None
    _given_devices: list[torch.device] | None = None
    _restoring: tuple[Any, Any, Any] = (
        None,
        None,
        None,
    )  # (module, optimizers, path) while a resume loads them

    def _take_lightning_arguments(self, accelerator: Any, parallel_devices: Any, **plugins: Any) -> None:
        owner = type(self).__name__
        self.plugin_objects = strategy_plugins(**plugins)
        if accelerator is not None and not hasattr(accelerator, "device_count"):
            raise bad_value(
                f"{owner}(accelerator)", accelerator, "None or a lightning.pytorch.accelerators object"
            )
        if parallel_devices is not None:
            parallel_devices = [torch.device(d) for d in parallel_devices]
        self._given_accelerator, self._given_devices = accelerator, parallel_devices
        self.cluster_environment = plugins.get("cluster_environment")
        self.checkpoint_io = plugins.get("checkpoint_io")

    @property
    def lightning_restore_optimizer(self) -> bool:
        """Whether a resumed fit restores the optimizers' states (a subclass may say no, as in Lightning)."""
        return True

    def load_optimizer_state_dict(self, checkpoint: Mapping[str, Any]) -> None:
        """Load `checkpoint["optimizer_states"]` into the fit's optimizers (what a resume calls; a subclass
        may override it, as in Lightning)."""
        module, optimizers, path = self._restoring
        super().restore_optimizers(module, optimizers, checkpoint, path)  # type: ignore[misc]

    def restore_optimizers(
        self, module: nn.Module, optimizers: list[Any], ckpt: Mapping[str, Any], path: Any
    ) -> None:
        """As Lightning's resume: through `load_optimizer_state_dict`, unless `lightning_restore_optimizer`
        says no (the learning-rate schedulers are restored either way)."""
        if not self.lightning_restore_optimizer:
            return
        self._restoring = (module, optimizers, path)
        self.load_optimizer_state_dict(ckpt)

    def tensor_init_context(self, empty_init: bool | None = None) -> contextlib.AbstractContextManager:
        """Layers created inside: on the strategy's device (the one given to it, when one was), in
        its precision plugin's dtype, not initialised when `empty_init` is true (as Lightning)."""
        precision = next((p for p in self.plugin_objects if hasattr(p, "tensor_init_context")), None)
        return init_context.tensor_init_context(self._init_device(), precision, empty_init)

    def _init_device(self) -> torch.device | None:
        if not self._given_devices:
            return None
        rank = self.cluster_environment.local_rank() if self.cluster_environment is not None else 0
        return self._given_devices[rank]

    def _check_given_devices(self, layout: Layout) -> None:
        owner, acc = type(self).__name__, self._given_accelerator
        if acc is not None and type(acc) is not type(layout.accelerator):
            raise MisconfigurationError(
                f"{owner}(accelerator={type(acc).__name__}()) but the Trainer runs on "
                f"{layout.accelerator.name}: pass the accelerator to the Trainer, Trainer(accelerator=...)."
            )
        expected = layout_devices(layout)
        if self._given_devices is not None and self._given_devices != expected:
            raise MisconfigurationError(
                f"{owner}(parallel_devices={self._given_devices}) but Trainer(accelerator=..., "
                f"devices={layout.requested_devices!r}) runs on {expected}: choose the devices with the Trainer's "
                "accelerator= and devices= and leave parallel_devices out."
            )


class _NoStorageOptions:
    """Lightning's `save_checkpoint(checkpoint, filepath, storage_options=None)` of a strategy that writes
    its checkpoints itself: `storage_options` (a CheckpointIO's) is a TypeError, as in Lightning."""

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: Any, storage_options: Any = None) -> None:
        if storage_options is not None:
            name = self._lightning_name  # type: ignore[attr-defined]
            raise SurgeTypeError(
                f"`{name}.save_checkpoint(..., storage_options=...)` is not supported because"
                f" `{name}` does not use the `CheckpointIO`."
            )
        super().save_checkpoint(checkpoint, filepath)  # type: ignore[misc]


class SingleDeviceStrategy(_LightningArguments, _single.SingleDeviceStrategy):
    """Lightning's one-device strategy: surge's, on `device` (which must be the Trainer's)."""

    def __init__(
        self,
        device: str | torch.device | int = "cpu",
        accelerator: Any = None,
        checkpoint_io: Any = None,
        precision_plugin: Any = None,
    ) -> None:
        super().__init__()
        self._take_lightning_arguments(
            accelerator, None, checkpoint_io=checkpoint_io, precision_plugin=precision_plugin
        )
        self._device = torch.device(device)

    def _init_device(self) -> torch.device | None:
        return self._device

    def check_layout(self, layout: Layout) -> None:
        super().check_layout(layout)
        self._check_given_devices(layout)
        trainer_device = layout_devices(layout)[0]
        if self._device != trainer_device and self._device != torch.device(trainer_device.type):
            raise MisconfigurationError(
                f"SingleDeviceStrategy(device={str(self._device)!r}) but Trainer(accelerator=..., devices=...) "
                f"runs on {trainer_device}: pass the Trainer the device's kind and index, e.g. "
                "Trainer(accelerator='cuda', devices=[1])."
            )


class DDPStrategy(_LightningArguments, _ddp.DDPStrategy):
    """Lightning's `DDPStrategy`: surge's DDP (`**kwargs` go to torch's DistributedDataParallel)."""

    def __init__(
        self,
        accelerator: Any = None,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: Any = None,
        checkpoint_io: Any = None,
        precision_plugin: Any = None,
        ddp_comm_state: object | None = None,
        ddp_comm_hook: Callable[..., Any] | None = None,
        ddp_comm_wrapper: Callable[..., Any] | None = None,
        model_averaging_period: int | None = None,
        process_group_backend: str | None = None,
        timeout: datetime.timedelta | None = default_pg_timeout,
        start_method: Literal["popen", "spawn", "fork", "forkserver"] = "popen",
        **kwargs: Any,
    ) -> None:
        check_start_method("DDPStrategy", start_method)
        unknown = sorted(set(kwargs) - set(DDP_KWARGS))
        if unknown:
            raise MisconfigurationError(
                f"DDPStrategy({', '.join(f'{k}=...' for k in unknown)}) is not supported: of torch's "
                f"DistributedDataParallel arguments surge passes {DDP_KWARGS} (it decides device_ids, "
                "process_group and the rest itself)."
            )
        hook = _comm_hook(ddp_comm_state, ddp_comm_hook, ddp_comm_wrapper, model_averaging_period)
        super().__init__(
            **kwargs, comm_hook=hook, comm_state=ddp_comm_state, timeout=timeout,
            process_group_backend=process_group_backend, start_method=start_method,
        )  # fmt: skip
        self._take_lightning_arguments(
            accelerator, parallel_devices, cluster_environment=cluster_environment,
            checkpoint_io=checkpoint_io, precision_plugin=precision_plugin,
        )  # fmt: skip

    def check_layout(self, layout: Layout) -> None:
        super().check_layout(layout)
        self._check_given_devices(layout)


def _comm_hook(state: object, hook: Any, wrapper: Any, averaging_period: int | None) -> Any:
    """The hook DDP registers (the wrapper applied, as Lightning does); what surge cannot honour refused."""
    if averaging_period is not None:
        raise MisconfigurationError(
            f"DDPStrategy(model_averaging_period={averaging_period}) is not supported: surge has no post-local-SGD "
            "model averaging. Leave model_averaging_period (and a PostLocalSGDState) out."
        )
    from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import PostLocalSGDState

    if isinstance(state, PostLocalSGDState):
        raise MisconfigurationError(
            "DDPStrategy(ddp_comm_state=PostLocalSGDState(...)) is not supported: it asks for post-local-SGD "
            "model averaging, which surge does not have."
        )
    if hook is None and (wrapper is not None or state is not None):
        given = "ddp_comm_wrapper" if wrapper is not None else "ddp_comm_state"
        raise MisconfigurationError(
            f"DDPStrategy({given}=...) needs ddp_comm_hook=..., the hook it goes with."
        )
    return wrapper(hook) if wrapper is not None and hook is not None else hook


class FSDPStrategy(_NoStorageOptions, _LightningArguments, FSDPArguments):
    """Lightning's `FSDPStrategy`: surge's FSDP2 strategy (`surge.strategies.FSDPStrategy`)."""

    _lightning_name = "FSDPStrategy"  # Lightning's messages name the class, not a subclass

    def __init__(
        self,
        accelerator: Any = None,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: Any = None,
        checkpoint_io: Any = None,
        precision_plugin: Any = None,
        process_group_backend: str | None = None,
        timeout: datetime.timedelta | None = default_pg_timeout,
        cpu_offload: Any = None,
        mixed_precision: Any = None,
        auto_wrap_policy: Any = None,
        activation_checkpointing: Any = None,
        activation_checkpointing_policy: Any = None,
        sharding_strategy: Any = "FULL_SHARD",
        state_dict_type: Literal["full", "sharded"] = "full",
        device_mesh: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            process_group_backend=process_group_backend, timeout=timeout, cpu_offload=cpu_offload,
            mixed_precision=mixed_precision, auto_wrap_policy=auto_wrap_policy,
            activation_checkpointing=activation_checkpointing,
            activation_checkpointing_policy=activation_checkpointing_policy,
            sharding_strategy=sharding_strategy, state_dict_type=state_dict_type, device_mesh=device_mesh,
            **kwargs,
        )  # fmt: skip
        self._take_lightning_arguments(
            accelerator, parallel_devices, cluster_environment=cluster_environment,
            checkpoint_io=checkpoint_io, precision_plugin=precision_plugin,
        )  # fmt: skip

    def check_layout(self, layout: Layout) -> None:
        super().check_layout(layout)
        self._check_given_devices(layout)


# Lightning's annotation, which LightningCLI parses (`--strategy.device_mesh=[1, 4]`); the value is refused
# when the strategy is built (fsdp_arguments.py).
FSDPStrategy.__init__.__annotations__["device_mesh"] = Union[tuple[int, int], ForwardRef("DeviceMesh"), None]  # noqa: UP007


class _Refused(Strategy):
    """A Lightning strategy surge has no engine for: importable, refused when built."""

    instead = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise MisconfigurationError(f"{type(self).__name__} is not supported by surge: {self.instead}")


class ModelParallelStrategy(_NoStorageOptions, _LightningArguments, _model_parallel.ModelParallel):
    """Lightning's `ModelParallelStrategy`: surge's `ModelParallel` (tensor parallel x FSDP2 on a
    "data_parallel" x "tensor_parallel" mesh; `"auto"` sizes as Lightning resolves them)."""

    sizes = ("data_parallel_size", "tensor_parallel_size")

    @property
    def _lightning_name(self) -> str:
        return type(self).__name__

    def __init__(
        self,
        data_parallel_size: int | Literal["auto"] = "auto",
        tensor_parallel_size: int | Literal["auto"] = "auto",
        save_distributed_checkpoint: bool = True,
        process_group_backend: str | None = None,
        timeout: datetime.timedelta | None = default_pg_timeout,
    ) -> None:
        if not isinstance(save_distributed_checkpoint, bool):
            raise bad_value(
                "ModelParallelStrategy(save_distributed_checkpoint)", save_distributed_checkpoint, "a bool"
            )
        super().__init__(
            data_parallel=data_parallel_size, tensor_parallel=tensor_parallel_size,
            process_group_backend=process_group_backend, timeout=timeout,  # type: ignore[arg-type]  # None: 30 min
        )  # fmt: skip
        # either value writes surge's sharded checkpoint (docs/lightning.md)
        self.save_distributed_checkpoint = save_distributed_checkpoint

    def setup_module(self, module: nn.Module) -> nn.Module:
        if not overrides(module, Module, "configure_model"):
            raise SurgeTypeError(
                f"{type(self).__name__} parallelizes nothing by itself: override configure_model() in "
                f"{type(module).__name__} and apply the plan there (parallelize_module over "
                'self.device_mesh["tensor_parallel"], fully_shard over self.device_mesh["data_parallel"]).'
            )
        return super().setup_module(module)

    @property
    def model(self) -> nn.Module | None:
        """The LightningModule, as Lightning's strategy answers (its FSDP units are inside it)."""
        return self.module

    def no_sync(self) -> contextlib.AbstractContextManager:
        """Lightning reduces the gradients of every micro-batch under this strategy (it defers only DDP's),
        so accumulation here does too: the same sums in the same order, the same weights."""
        return contextlib.nullcontext()


class DeepSpeedStrategy(_Refused):
    instead = "surge does not run DeepSpeed. FSDPStrategy(...) (or Trainer(strategy='fsdp')) shards parameters, gradients and optimizer state (ZeRO-3-like)."


class XLAStrategy(_Refused):
    instead = "surge does not run on TPUs (XLA). Use DDPStrategy or FSDPStrategy on GPUs or CPUs."


class SingleDeviceXLAStrategy(XLAStrategy):
    pass


def __getattr__(name: str) -> Any:
    if name == "StrategyRegistry":  # built on first use: it lists surge's strategy names
        from .registries import strategies

        return strategies(DeepSpeedStrategy)
    raise AttributeError(f"module 'lightning.pytorch.strategies' has no attribute {name!r}")


__all__ = [
    "DDPStrategy",
    "DeepSpeedStrategy",
    "FSDPStrategy",
    "ModelParallelStrategy",
    "ParallelStrategy",
    "SingleDeviceStrategy",
    "SingleDeviceXLAStrategy",
    "Strategy",
    "XLAStrategy",
]
