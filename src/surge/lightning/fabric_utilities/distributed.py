"""`lightning.fabric.utilities.distributed`: torch's `ReduceOp`; its two public helpers need a Fabric
or Lightning strategy object: both import, and are refused when used. Lightning's private helpers
that projects import (`_sync_ddp_if_available`, ...) are refused by name."""

from __future__ import annotations

from torch.distributed import ReduceOp

from ..refuse import module_getattr, refused_at_use

is_shared_filesystem = refused_at_use(
    "lightning.fabric.utilities.distributed",
    "is_shared_filesystem",
    "it tests a Fabric or Lightning strategy object, which surge does not have; "
    "write a file on rank zero and check for it on the others after trainer.strategy.barrier()",
)
DistributedSamplerWrapper = refused_at_use(
    "lightning.fabric.utilities.distributed",
    "DistributedSamplerWrapper",
    "under several processes the Trainer gives each rank its share of a standard sampler itself; "
    "for a sampler of your own, give the DataLoader a torch DistributedSampler",
)

_PRIVATE = "Lightning's private helper; call torch.distributed directly (trainer.strategy.reduce/all_gather/barrier in a module)"
__getattr__ = module_getattr(
    "lightning.fabric.utilities.distributed",
    dict.fromkeys(
        (
            "_distributed_is_initialized", "_get_default_process_group_backend_for_device",
            "_init_dist_connection", "_sync_ddp_if_available", "_sync_ddp", "_gather_all_tensors",
            "_destroy_dist_connection", "_all_gather_ddp_if_available",
        ),
        _PRIVATE,
    ),
)  # fmt: skip

__all__ = ["DistributedSamplerWrapper", "ReduceOp", "is_shared_filesystem"]
