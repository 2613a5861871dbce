"""Lightning's "boring" bug-report classes: `RandomDataset`, `RandomDictDataset`, `BoringModel`,
`ManualOptimBoringModel`, `BoringDataModule` (and its `BoringDataModuleNoLen`, `IterableBoringDataModule`), `DemoModel`, with the same shapes, losses and
optimizers as Lightning's."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch.optim import Optimizer
from torch.utils.data import DataLoader, Dataset, IterableDataset, Subset

from ...datamodule import DataModule
from ...module import Module
from ...optim.manual import LightningOptimizer


class RandomDataset(Dataset):
    """`length` random vectors of `size` (drawn from torch's global generator when built)."""

    def __init__(self, size: int, length: int) -> None:
        self.len = length
        self.data = torch.randn(length, size)

    def __getitem__(self, index: int) -> Tensor:
        return self.data[index]

    def __len__(self) -> int:
        return self.len


class RandomDictDataset(Dataset):
    """`length` random vectors of `size`, each item `{"a": x, "b": x + 2}`."""

    def __init__(self, size: int, length: int) -> None:
        self.len = length
        self.data = torch.randn(length, size)

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        a = self.data[index]
        return {"a": a, "b": a + 2}

    def __len__(self) -> int:
        return self.len


class RandomIterableDataset(IterableDataset):
    """`count` random vectors of `size`, drawn as iterated."""

    def __init__(self, size: int, count: int) -> None:
        self.count, self.size = count, size

    def __iter__(self) -> Any:
        for _ in range(self.count):
            yield torch.randn(self.size)


class BoringModel(Module):
    """A linear layer 32 -> 2 trained by SGD (lr 0.1, StepLR) to output ones; its data are four
    `RandomDataset(32, 64)` loaders (batch size 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(32, 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.layer(x)

    def loss(self, preds: Tensor, labels: Tensor | None = None) -> Tensor:
        if labels is None:
            labels = torch.ones_like(preds)
        return nn.functional.mse_loss(preds, labels)

    def step(self, batch: Any) -> Tensor:
        return self.loss(self(batch))

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return {"loss": self.step(batch)}

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        return {"x": self.step(batch)}

    def test_step(self, batch: Any, batch_idx: int) -> Any:
        return {"y": self.step(batch)}

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
        return [optimizer], [lr_scheduler]

    def train_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))

    def val_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))

    def test_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))


class ManualOptimBoringModel(BoringModel):
    """`BoringModel` under manual optimization: each training step zeroes, backpropagates and steps
    its one optimizer itself."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        opt = self.optimizers()
        assert isinstance(opt, Optimizer | LightningOptimizer)
        loss = self.step(batch)
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        return loss


class BoringDataModule(DataModule):
    """256 random vectors split by stage: 64 to train, 64 to validate, 64 to test, 64 to predict."""

    def __init__(self) -> None:
        super().__init__()
        self.random_full = RandomDataset(32, 64 * 4)

    def setup(self, stage: str) -> None:
        if stage == "fit":
            self.random_train = Subset(self.random_full, indices=range(64))
        if stage in ("fit", "validate"):
            self.random_val = Subset(self.random_full, indices=range(64, 64 * 2))
        if stage == "test":
            self.random_test = Subset(self.random_full, indices=range(64 * 2, 64 * 3))
        if stage == "predict":
            self.random_predict = Subset(self.random_full, indices=range(64 * 3, 64 * 4))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.random_train)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.random_val)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.random_test)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.random_predict)


class DemoModel(Module):
    """A linear layer 32 -> `out_dim` with a ReLU, trained by Adam; the loss is the outputs' sum."""

    def __init__(self, out_dim: int = 10, learning_rate: float = 0.02) -> None:
        super().__init__()
        self.l1 = nn.Linear(32, out_dim)
        self.learning_rate = learning_rate

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.l1(x.view(x.size(0), -1)))

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        return self(batch).sum()

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=self.learning_rate)


class BoringDataModuleNoLen(DataModule):
    """BoringDataModule's stages over iterable datasets without a length: 512 vectors to train,
    128 to validate, 256 to test, 64 to predict."""

    SIZES = {"train": 512, "val": 128, "test": 256, "predict": 64}
    random_train: IterableDataset  # each set by setup() for its stage
    random_val: IterableDataset
    random_test: IterableDataset
    random_predict: IterableDataset

    def setup(self, stage: str) -> None:
        for name in _stage_splits(stage):
            setattr(self, f"random_{name}", RandomIterableDataset(32, self.SIZES[name]))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.random_train)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.random_val)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.random_test)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.random_predict)


class IterableBoringDataModule(DataModule):
    """Two loaders per stage, one over a sized dataset and one over an iterable one, of 4-vectors:
    16 each to train, 32 to validate, 64 to test, 128 to predict."""

    SIZES = {"train": 16, "val": 32, "test": 64, "predict": 128}
    train_datasets: list[Dataset]  # each set by setup() for its stage
    val_datasets: list[Dataset]
    test_datasets: list[Dataset]
    predict_datasets: list[Dataset]

    def setup(self, stage: str) -> None:
        for name in _stage_splits(stage):
            n = self.SIZES[name]
            setattr(self, f"{name}_datasets", [RandomDataset(4, n), RandomIterableDataset(4, n)])

    def train_dataloader(self) -> list[DataLoader]:
        return [DataLoader(d) for d in self.train_datasets]

    def val_dataloader(self) -> list[DataLoader]:
        return [DataLoader(d) for d in self.val_datasets]

    def test_dataloader(self) -> list[DataLoader]:
        return [DataLoader(d) for d in self.test_datasets]

    def predict_dataloader(self) -> list[DataLoader]:
        return [DataLoader(d) for d in self.predict_datasets]


def _stage_splits(stage: str) -> tuple[str, ...]:
    """The splits `setup(stage)` builds: fit builds train and val, validate val, test and predict their own."""
    return {"fit": ("train", "val"), "validate": ("val",), "test": ("test",), "predict": ("predict",)}.get(
        stage, ()
    )
