"""`surge.DataModule`: the data of a run, prepared once and split by stage."""

from __future__ import annotations

from typing import Any

from .hparams import HyperparametersMixin


class DataModule(HyperparametersMixin):
    """Downloads or builds the data (`prepare_data`, once), splits it (`setup`) and makes loaders."""

    def __init__(self) -> None:
        self.trainer: Any = None

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

    def state_dict(self) -> dict[str, Any]:
        """State to keep in checkpoints."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what `state_dict` returned."""
