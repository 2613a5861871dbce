"""`lightning.pytorch.core`: the module and data-module base classes are surge's own."""

from ...datamodule import DataModule as LightningDataModule
from ...module import Module as LightningModule
from .optimizer import LightningOptimizer

__all__ = ["LightningDataModule", "LightningModule", "LightningOptimizer"]
