"""What a datamodule shows of itself (`str(dm)`) before and after each stage's setup, for the
demo datamodules with sized, unsized and several loaders, and what `from_datasets` passes to
a datamodule's `__init__`."""

import lightning.pytorch as pl
import record
import torch
from lightning.pytorch.demos.boring_classes import (
    BoringDataModule,
    BoringDataModuleNoLen,
    IterableBoringDataModule,
)
from torch.utils.data import TensorDataset

for cls in (BoringDataModule, BoringDataModuleNoLen, IterableBoringDataModule):
    for stage in (None, "fit", "validate", "test", "predict"):
        dm = cls()
        if stage is not None:
            dm.setup(stage)
        record.put(f"{cls.__name__}/{stage}", str(dm))


class Sized(pl.LightningDataModule):
    def __init__(self, other, batch_size=1):
        super().__init__()
        self.other, self.batch_size = other, batch_size


class Open(pl.LightningDataModule):
    def __init__(self, **kwargs):
        super().__init__()
        self.kwargs = kwargs


data = TensorDataset(torch.arange(10.0))
dm = Sized.from_datasets(data, batch_size=4, num_workers=2, other=5)
record.put("named", [dm.other, dm.batch_size, len(dm.train_dataloader())])
record.put("kwargs", Open.from_datasets(data, val_dataset=data, batch_size=3).kwargs)
record.put("from_datasets_text", str(Open.from_datasets(data, val_dataset=[data, data], batch_size=3)))
