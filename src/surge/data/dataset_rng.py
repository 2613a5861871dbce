"""Whether a dataset draws random numbers when it loads a sample (its workers' streams then matter)."""

from __future__ import annotations

from typing import Any

import torch

from ..seed import rng_state, set_rng_state


def draws_random_numbers(dataset: Any) -> bool:
    """Whether loading one sample draws from python's, numpy's or torch's global RNG.

    Loads `dataset[0]` once in this process with the RNG states put back afterwards.
    """
    if not hasattr(dataset, "__getitem__") or not _has_items(dataset):
        return False
    before = rng_state()
    try:
        dataset[0]
    except Exception:  # noqa: BLE001 - a dataset that cannot load index 0 here: assume it may draw
        return True
    finally:
        after = rng_state()
        set_rng_state(before)
    return not _same_rng(before, after)


def _has_items(dataset: Any) -> bool:
    try:
        return len(dataset) > 0
    except TypeError:
        return True


def _same_rng(a: dict[str, Any], b: dict[str, Any]) -> bool:
    pa, pb = a["python"], b["python"]
    return (
        (pa["version"], pa["gauss"]) == (pb["version"], pb["gauss"])
        and torch.equal(pa["state"], pb["state"])
        and torch.equal(a["numpy"]["keys"], b["numpy"]["keys"])
        and a["numpy"]["pos"] == b["numpy"]["pos"]
        and torch.equal(a["torch"], b["torch"])
    )
