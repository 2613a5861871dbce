"""Lightning's FSDP arguments (FSDP1's: wrap policies, sharding strategies, `CPUOffload`) mapped onto
surge's FSDP2 strategy, or refused by name where FSDP2 here has no counterpart."""

from __future__ import annotations

import datetime
import functools
from typing import Any

from torch import nn

from ..errors import MisconfigurationError, bad_value
from ..strategies import fsdp as _fsdp

RESHARD = {"FULL_SHARD": True, "SHARD_GRAD_OP": False}  # sharding_strategy -> reshard_after_forward
POLICY = "a set of module classes, a ModuleWrapPolicy, or a functools.partial of torch's transformer_auto_wrap_policy"


class FSDPArguments(_fsdp.FSDPStrategy):
    """surge's FSDPStrategy built from Lightning's `FSDPStrategy` arguments (keyword-only here)."""

    def __init__(
        self,
        *,
        process_group_backend: str | None,
        timeout: datetime.timedelta | None,
        cpu_offload: Any,
        mixed_precision: Any,
        auto_wrap_policy: Any,
        activation_checkpointing: Any,
        activation_checkpointing_policy: Any,
        sharding_strategy: Any,
        state_dict_type: str,
        device_mesh: Any,
        **kwargs: Any,
    ) -> None:
        _refuse_unmapped(mixed_precision, device_mesh, state_dict_type, kwargs)
        self.sharding_strategy = _sharding_strategy(sharding_strategy)
        offload = _offload(cpu_offload)
        super().__init__(
            shard=_shard(auto_wrap_policy, "auto_wrap_policy", sizes=True),
            reshard_after_forward=RESHARD[self.sharding_strategy.name],
            cpu_offload=offload,
            timeout=timeout,  # type: ignore[arg-type]  # None: 30 minutes
            process_group_backend=process_group_backend,
        )
        from torch.distributed.fsdp import CPUOffload

        self.cpu_offload = CPUOffload(offload_params=offload)  # type: ignore[assignment]  # Lightning's: torch's dataclass
        # Lightning's `kwargs`: what its FSDP1 wrapper would receive (the wrap policy, use_orig_params).
        self.kwargs = {**({"auto_wrap_policy": auto_wrap_policy} if auto_wrap_policy is not None else {}),
                       **kwargs, "use_orig_params": True}  # fmt: skip
        self.mixed_precision = None
        self.state_dict_type = state_dict_type
        self.activation_checkpointing_policy = _checkpointing(
            activation_checkpointing, activation_checkpointing_policy
        )


def _refuse_unmapped(
    mixed_precision: Any, device_mesh: Any, state_dict_type: Any, kwargs: dict[str, Any]
) -> None:
    if mixed_precision is not None:
        raise MisconfigurationError(
            f"FSDPStrategy(mixed_precision={mixed_precision!r}) is not supported: give the Trainer "
            "precision='bf16-mixed' (or '16-mixed'); surge turns it into FSDP's mixed-precision policy."
        )
    if device_mesh is not None:
        raise MisconfigurationError(
            f"FSDPStrategy(device_mesh={device_mesh!r}) is not supported: surge's FSDP shards over every "
            "process (one dimension). Leave device_mesh out."
        )
    if state_dict_type not in ("full", "sharded"):
        raise bad_value("FSDPStrategy(state_dict_type)", state_dict_type, '"full" or "sharded"')
    others = {k: v for k, v in kwargs.items() if not (k == "use_orig_params" and v is True)}
    if others:
        raise MisconfigurationError(
            f"FSDPStrategy({', '.join(f'{k}={v!r}' for k, v in others.items())}) is not supported: these are "
            "arguments of torch's FullyShardedDataParallel (FSDP1), and surge runs FSDP2 (fully_shard), which "
            "keeps the original parameters (use_orig_params=True) and takes none of the others."
        )


def _sharding_strategy(value: Any) -> Any:
    from torch.distributed.fsdp import ShardingStrategy

    name = value.upper() if isinstance(value, str) else getattr(value, "name", None)
    if name not in ShardingStrategy.__members__:
        raise bad_value(
            "FSDPStrategy(sharding_strategy)", value, f"one of {list(ShardingStrategy.__members__)}"
        )
    if name == "NO_SHARD":
        raise MisconfigurationError(
            "FSDPStrategy(sharding_strategy='NO_SHARD') is not supported: that is data parallelism without "
            "sharding; use DDPStrategy() (or Trainer(strategy='ddp'))."
        )
    if name not in RESHARD:
        raise MisconfigurationError(
            f"FSDPStrategy(sharding_strategy={name!r}) is not supported: hybrid sharding needs a 2-D device "
            "mesh, which surge's FSDP does not build. Use 'FULL_SHARD' or 'SHARD_GRAD_OP'."
        )
    return ShardingStrategy[name]


def _offload(value: Any) -> bool:
    if value is None or isinstance(value, bool):
        return bool(value)
    offload = getattr(value, "offload_params", None)
    if isinstance(offload, bool):  # torch's CPUOffload(offload_params=...)
        return offload
    raise bad_value("FSDPStrategy(cpu_offload)", value, "None, True, False or torch's CPUOffload(...)")


def _classes(value: Any) -> tuple[type[nn.Module], ...] | None:
    """The module classes a Lightning policy names, or None when it is not one of those forms."""
    if isinstance(value, type) and issubclass(value, nn.Module):
        return (value,)
    if isinstance(value, set | frozenset | list | tuple):
        return tuple(value)
    classes = getattr(value, "_module_classes", None)  # torch's ModuleWrapPolicy keeps them here
    if isinstance(classes, set | frozenset):
        return tuple(classes)
    if (
        isinstance(value, functools.partial)
        and getattr(value.func, "__name__", "") == "transformer_auto_wrap_policy"
    ):
        layers = value.keywords.get("transformer_layer_cls")
        return tuple(layers) if layers is not None else None
    return None


def _shard(policy: Any, argument: str, sizes: bool) -> Any:
    """surge's `shard=` for a Lightning wrap policy: module classes, or (sizes) a parameter count."""
    if policy is None:
        return None
    classes = _classes(policy)
    if classes is not None:
        return classes
    if sizes and _size_based(policy):
        return int(policy.keywords.get("min_num_params", int(1e8)))
    allowed = POLICY + (" or of size_based_auto_wrap_policy(min_num_params=N)" if sizes else "")
    raise MisconfigurationError(
        f"FSDPStrategy({argument}={policy!r}) is not supported: surge takes {allowed}."
    )


def _size_based(policy: Any) -> bool:
    """A `functools.partial(size_based_auto_wrap_policy, min_num_params=N)`."""
    return (
        isinstance(policy, functools.partial)
        and getattr(policy.func, "__name__", "") == "size_based_auto_wrap_policy"
        and set(policy.keywords) <= {"min_num_params"}
    )


def _checkpointing(classes: Any, policy: Any) -> tuple[type[nn.Module], ...] | None:
    """The module classes whose activations are recomputed in backward (surge's activation checkpointing)."""
    if classes is not None and policy is not None:
        raise MisconfigurationError(
            "FSDPStrategy(activation_checkpointing=..., activation_checkpointing_policy=...): give only the latter."
        )
    chosen = _shard(policy if policy is not None else classes, "activation_checkpointing_policy", sizes=False)
    return tuple(chosen) if chosen is not None else None
