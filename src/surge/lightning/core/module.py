"""`lightning.pytorch.core.module`: `LightningModule` is `surge.Module`."""

from ...module import Module as LightningModule

__all__ = ["LightningModule"]
