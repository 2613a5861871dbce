"""The text of a DataModule (`str(dm)`): each stage's loaders and the sizes of their datasets, as
Lightning writes it, e.g. `{Train dataloader: size=64}`, one line per stage."""

from __future__ import annotations

import os
from collections.abc import Sized
from typing import Any

from torch.utils.data import DataLoader

STAGES = (
    ("Train dataloader", "train_dataloader"),
    ("Validation dataloader", "val_dataloader"),
    ("Test dataloader", "test_dataloader"),
    ("Predict dataloader", "predict_dataloader"),
)


def _size(loader: Any) -> str:
    dataset = loader.dataset
    return str(len(dataset)) if isinstance(dataset, Sized) else "NA"


def _loaders_text(loaders: Any) -> str:
    if isinstance(loaders, DataLoader):
        return f"size={_size(loaders)}"
    if isinstance(loaders, list | tuple):
        return " ; ".join(
            f"{i}. size={_size(dl)}" if isinstance(dl, DataLoader) else "None"
            for i, dl in enumerate(loaders, start=1)
        )
    return "None"


def describe_datamodule(dm: Any) -> str:
    """Each stage's loader hook called now: the sizes of its datasets ("NA" without a length),
    or "None" where the hook fails (not implemented, or its stage not set up yet)."""
    lines = []
    for title, hook in STAGES:
        try:
            text = _loaders_text(getattr(dm, hook)())
        except Exception:  # Lightning's reading: a loader that cannot be made is shown as none
            text = "None"
        lines.append(f"{{{title}: {text}}}")
    return os.linesep.join(lines)
