"""`lightning.fabric.utilities.apply_func`: walking collections and moving them between devices."""

from __future__ import annotations

from numbers import Number
from typing import Any

import numpy as np
import torch
from lightning_utilities.core.apply_func import apply_to_collection
from torch import Tensor

from ..utilities import move_data_to_device


def convert_to_tensors(data: Any, device: torch.device | str | int) -> Any:
    """Numbers and numpy arrays in `data` made tensors, then everything moved to `device`."""
    data = apply_to_collection(data, np.ndarray, lambda a: torch.from_numpy(a))
    data = apply_to_collection(data, (Number, np.number), lambda n: torch.tensor(n))
    return move_data_to_device(data, device)


def convert_tensors_to_scalars(data: Any) -> Any:
    """Every one-element tensor in `data` as its Python number; a larger tensor is refused."""

    def item(value: Tensor) -> int | float | bool:
        if value.numel() != 1:
            raise ValueError(
                f"The metric `{value}` does not contain a single element, thus it cannot be converted to a scalar."
            )
        return value.item()

    return apply_to_collection(data, Tensor, item)


__all__ = ["apply_to_collection", "convert_tensors_to_scalars", "convert_to_tensors", "move_data_to_device"]
