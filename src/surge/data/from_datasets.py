"""`DataModule.from_datasets(...)`: a datamodule whose `*_dataloader()` hooks wrap given datasets,
as Lightning's `LightningDataModule.from_datasets` builds one."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from torch.utils.data import DataLoader, Dataset, IterableDataset

HOOKS = ("train", "val", "test", "predict")


class DatasetLoaders:
    """One stage's hook: a loader per dataset (a dict or a list of them keeps its shape), shuffled
    for training unless the dataset is iterable, with the batch size and workers given."""

    def __init__(self, datasets: Any, batch_size: int, num_workers: int, shuffle: bool) -> None:
        self.datasets, self.batch_size, self.num_workers, self.shuffle = (
            datasets,
            batch_size,
            num_workers,
            shuffle,
        )

    def loader(self, dataset: Dataset) -> DataLoader:
        shuffle = self.shuffle and not isinstance(dataset, IterableDataset)
        return DataLoader(dataset, batch_size=self.batch_size, shuffle=shuffle, num_workers=self.num_workers)

    def __call__(self) -> Any:
        if isinstance(self.datasets, Mapping):
            return {key: self.loader(ds) for key, ds in self.datasets.items()}
        if isinstance(self.datasets, Sequence) and not isinstance(self.datasets, Dataset):
            return [self.loader(ds) for ds in self.datasets]
        return self.loader(self.datasets)


def attach_datasets(datamodule: Any, datasets: dict[str, Any], batch_size: int, num_workers: int) -> Any:
    """Give `datamodule` (just built by `from_datasets`) a hook for each stage with a dataset."""
    for stage in HOOKS:
        if datasets.get(stage) is not None:
            hook = DatasetLoaders(datasets[stage], batch_size, num_workers, shuffle=stage == "train")
            setattr(datamodule, f"{stage}_dataloader", hook)
    return datamodule


def init_arguments(cls: type, given: dict[str, Any], **special: Any) -> dict[str, Any]:
    """`given`, plus those of `special` (batch_size, num_workers) that `cls.__init__` takes by name
    (all of them when it takes `**kwargs`), as Lightning passes them on."""
    params = inspect.signature(cls).parameters  # __init__'s, without self
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    return {**given, **{k: v for k, v in special.items() if takes_any or k in params}}
