"""`lightning.pytorch.core.datamodule`: `LightningDataModule` is `surge.DataModule`."""

from ...datamodule import DataModule as LightningDataModule

__all__ = ["LightningDataModule"]
