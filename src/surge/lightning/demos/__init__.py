"""`lightning.pytorch.demos`: the bug-report "boring" classes and the transformer language model
(its `WikiText2` generates text; nothing is downloaded). Other demos are refused by name."""

from ..refuse import module_getattr
from .boring_classes import (
    BoringDataModule,
    BoringDataModuleNoLen,
    BoringModel,
    DemoModel,
    IterableBoringDataModule,
    RandomDataset,
    RandomIterableDataset,
)
from .transformer import LightningTransformer, PositionalEncoding, Transformer, WikiText2

__getattr__ = module_getattr(
    "lightning.pytorch.demos",
    {
        name: "surge does not ship this demo"
        for name in ("LightningLSTM", "SimpleLSTM", "SequenceSampler", "MNIST", "MNISTDataModule")
    },
)

__all__ = [
    "BoringDataModule",
    "BoringDataModuleNoLen",
    "BoringModel",
    "DemoModel",
    "IterableBoringDataModule",
    "LightningTransformer",
    "PositionalEncoding",
    "RandomDataset",
    "RandomIterableDataset",
    "Transformer",
    "WikiText2",
]
