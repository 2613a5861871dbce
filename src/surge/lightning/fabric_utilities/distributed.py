"""`lightning.fabric.utilities.distributed`: its two public helpers need a Fabric or Lightning
strategy object; both import, and are refused when used."""

from __future__ import annotations

from ..refuse import refused_at_use

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

__all__ = ["DistributedSamplerWrapper", "is_shared_filesystem"]
