"""`surge.DataModule`: the data of a run, prepared once and split by stage."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .module.hparams import HyperparametersMixin

if TYPE_CHECKING:
    from .trainer import Trainer


class DataModule(HyperparametersMixin):
    """Downloads or builds the data (`prepare_data`, once), splits it (`setup`) and makes loaders."""

    def __init__(self) -> None:
        self.trainer: Trainer | None = None

    @classmethod
    def from_datasets(
        cls,
        train_dataset: Any = None,
        val_dataset: Any = None,
        test_dataset: Any = None,
        predict_dataset: Any = None,
        batch_size: int = 1,
        num_workers: int = 0,
        **datamodule_kwargs: Any,
    ) -> DataModule:
        """A datamodule (`cls(**datamodule_kwargs)`, given `batch_size` and `num_workers` too where
        its `__init__` takes them) whose loader hooks wrap the given datasets (a dataset, or a list or
        dict of them): `DataLoader(ds, batch_size, shuffle, num_workers)`, shuffled for training
        unless the dataset is iterable, as Lightning's."""
        from .data.from_datasets import attach_datasets, init_arguments

        datasets = {
            "train": train_dataset,
            "val": val_dataset,
            "test": test_dataset,
            "predict": predict_dataset,
        }
        kwargs = init_arguments(cls, datamodule_kwargs, batch_size=batch_size, num_workers=num_workers)
        return attach_datasets(cls(**kwargs), datasets, batch_size, num_workers)

    def __str__(self) -> str:
        """Each stage's loaders and their datasets' sizes (the hooks are called), as Lightning shows them."""
        from .data.describe import describe_datamodule

        return describe_datamodule(self)

    def prepare_data(self) -> None:
        """Work done once per machine (e.g. writing a cache); runs before `setup`."""

    def setup(self, stage: str) -> None:
        """Build the datasets for `stage`: "fit", "validate", "test" or "predict"."""

    def teardown(self, stage: str) -> None:
        """Release what `setup` built."""

    def train_dataloader(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} defines no train_dataloader()")

    def val_dataloader(self) -> Any:
        return None

    def test_dataloader(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} defines no test_dataloader()")

    def predict_dataloader(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} defines no predict_dataloader()")

    def on_exception(self, exception: BaseException) -> None:
        """Called when a stage fails, after the callbacks' `on_exception`."""

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change a batch before it is moved (used instead of the module's when overridden here)."""
        return batch

    def transfer_batch_to_device(self, batch: Any, device: Any, dataloader_idx: int) -> Any:
        """Move a batch to the device (used instead of the module's when overridden here)."""
        from .data import move_to_device

        return move_to_device(batch, device)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change a batch after it is moved (used instead of the module's when overridden here)."""
        return batch

    def state_dict(self) -> dict[str, Any]:
        """State to keep in checkpoints."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what `state_dict` returned."""

    @classmethod
    def load_from_checkpoint(
        cls,
        checkpoint_path: str | Path,
        map_location: Any = None,
        hparams_file: str | Path | None = None,
        weights_only: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        """A new datamodule built from the checkpoint's saved hyper-parameters (`kwargs` override
        them), its `load_state_dict` given the saved state if there is one, as Lightning's. The
        checkpoint loads safely (weights-only, digest verified); `map_location` is accepted (a
        datamodule has no tensors to place)."""
        from .checkpoint import load_checkpoint
        from .errors import bad_value
        from .module.hparams import init_kwargs
        from .module.instantiated import cli_recorded, rebuilt_arguments

        where = f"{cls.__name__}.load_from_checkpoint"
        if hparams_file is not None:
            raise bad_value(
                f"{where}(hparams_file)", hparams_file, "None (the checkpoint's own hyper-parameters)"
            )
        if weights_only not in (None, True):
            raise bad_value(f"{where}(weights_only)", weights_only, "None or True (surge loads weights-only)")
        ckpt = load_checkpoint(checkpoint_path)
        saved = ckpt.get(DATAMODULE_HPARAMS_KEY, {})
        if cli_recorded(saved):  # recorded by LightningCLI: its keys out, class paths built
            saved = rebuilt_arguments(cls, saved, str(checkpoint_path))
        datamodule = cls(**init_kwargs(cls, saved, kwargs, str(checkpoint_path)))
        saved_state = saved_datamodule_state(ckpt, datamodule)
        if saved_state is not None:
            datamodule.load_state_dict(saved_state)
        return datamodule


DATAMODULE_HPARAMS_KEY = "datamodule_hyper_parameters"  # Lightning's key for them in a checkpoint


def saved_datamodule_state(ckpt: Any, datamodule: Any) -> Any:
    """The checkpoint's datamodule state for `datamodule`, or None. As Lightning (which keys it by
    the class's qualified name): only a non-empty state saved by a datamodule of the same class."""
    state, saved_class = ckpt.get("datamodule"), ckpt.get("surge", {}).get("datamodule_class")
    if not state or saved_class not in (None, type(datamodule).__qualname__):
        return None
    return state
