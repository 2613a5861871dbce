"""`lightning.pytorch.plugins` under `surge run`: cluster environments, checkpoint IO, precision and
layer sync, each standing for surge's own part. `Trainer(plugins=...)` turns them into one decided
value (`surge.arguments.plugins.resolve_plugins`); see docs/lightning.md, "Plugins"."""

from __future__ import annotations

from .environments import ClusterEnvironment
from .io import AsyncCheckpointIO, CheckpointIO, TorchCheckpointIO, XLACheckpointIO
from .layer_sync import LayerSync, TorchSyncBatchNorm
from .precision import (
    BitsandbytesPrecision,
    DeepSpeedPrecision,
    DoublePrecision,
    FSDPPrecision,
    HalfPrecision,
    MixedPrecision,
    Precision,
    TransformerEnginePrecision,
    XLAPrecision,
)

__all__ = [
    "AsyncCheckpointIO",
    "BitsandbytesPrecision",
    "CheckpointIO",
    "ClusterEnvironment",
    "DeepSpeedPrecision",
    "DoublePrecision",
    "FSDPPrecision",
    "HalfPrecision",
    "LayerSync",
    "MixedPrecision",
    "Precision",
    "TorchCheckpointIO",
    "TorchSyncBatchNorm",
    "TransformerEnginePrecision",
    "XLACheckpointIO",
    "XLAPrecision",
]
