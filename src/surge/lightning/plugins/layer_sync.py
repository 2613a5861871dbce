"""Lightning's layer synchronisation plugins: `TorchSyncBatchNorm` is `sync_batchnorm=True`."""

from __future__ import annotations

from ...arguments.plugins import Plugins
from ...errors import MisconfigurationError

KIND = "TorchSyncBatchNorm"  # Lightning counts every LayerSync under this name


class LayerSync:
    """Lightning's base for synchronising layers across processes; surge has one: batch norm."""

    plugin_kind = KIND

    def surge_plugin(self) -> Plugins:
        raise MisconfigurationError(
            f"plugins=[{type(self).__name__}()]: surge synchronises only batch norm (TorchSyncBatchNorm, "
            "or sync_batchnorm=True); convert your layers in configure_model instead."
        )


class TorchSyncBatchNorm(LayerSync):
    """torch's SyncBatchNorm for every BatchNorm layer: surge's `sync_batchnorm=True`."""

    def surge_plugin(self) -> Plugins:
        if type(self) is not TorchSyncBatchNorm:
            return super().surge_plugin()
        return Plugins(sync_batchnorm=True, kinds=(KIND,))


__all__ = ["LayerSync", "TorchSyncBatchNorm"]
