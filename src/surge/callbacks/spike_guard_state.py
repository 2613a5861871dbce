"""`SpikeGuard`'s checkpoint state, checked entry by entry when a checkpoint is loaded.

The state is the rollback count, the loss statistics, the losses not judged yet and the last good
snapshot; a damaged one (a wrong type, shape or count, a snapshot missing an entry) is refused at
load with a CheckpointError naming the entry, never a raw error at the first rollback mid-training.
What only the run can tell (the snapshot's model entries and shapes, its finite weights, as many
optimizers and schedulers) is checked when training starts (`surge.loops.snapshot.check_loaded`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from ..errors import CheckpointError

SNAPSHOT_COUNTERS = ("global_step", "epoch", "batches_done")


def checked_state(state: Any) -> dict[str, Any]:
    """`state` (a `SpikeGuard.state_dict()` read back) with its entries checked; absent entries
    take their start values."""
    if not isinstance(state, Mapping):
        _refuse("", f"is a {type(state).__name__}, not a dict")
    rollbacks = state.get("rollbacks", 0)
    if not _count(rollbacks):
        _refuse("rollbacks", f"is {rollbacks!r}, not an int >= 0")
    due = state.get("snapshot_due", False)
    if not isinstance(due, bool):
        _refuse("snapshot_due", f"is {due!r}, not a bool")
    return {
        "rollbacks": rollbacks,
        "snapshot_due": due,
        "stats": _stats(state.get("stats"), "stats"),
        "pending": _pending(state.get("pending")),
        "snapshot": _snapshot(state.get("snapshot")),
    }


def _refuse(key: str, what: str) -> Any:
    where = f"the SpikeGuard state's {key!r} entry" if key else "the SpikeGuard state"
    raise CheckpointError(f"{where} {what}; the checkpoint is damaged or was not written by SpikeGuard.")


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _stats(value: Any, key: str) -> Tensor | None:
    """The running [mean, variance, count]: three finite floats, variance and count >= 0."""
    if value is None:
        return None
    if not isinstance(value, Tensor) or value.shape != (3,) or not value.is_floating_point():
        _refuse(key, f"is {_describe(value)}, not a float tensor of shape (3,)")
    if not bool(value.isfinite().all()) or bool((value[1:] < 0).any()):  # a resume: read once
        _refuse(key, f"holds {value.tolist()}: a mean, a variance >= 0 and a count >= 0, all finite")
    return value


def _pending(value: Any) -> Tensor | None:
    """The losses not judged yet, one a row (shape (n,) or (n, 1)); inf/NaN allowed: they are judged."""
    if value is None:
        return None
    ok = isinstance(value, Tensor) and value.is_floating_point() and value.dim() in (1, 2)
    if not ok or len(value) == 0 or (value.dim() == 2 and value.shape[1] != 1):
        _refuse("pending", f"is {_describe(value)}, not a float tensor of shape (n,) or (n, 1)")
    return value


def _snapshot(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        _refuse("snapshot", f"is a {type(value).__name__}, not a dict")
    missing = [k for k in ("model", "optim", "precision", "rng", *SNAPSHOT_COUNTERS) if k not in value]
    if missing:
        _refuse("snapshot", f"has no {missing}")
    _model_and_optim(value["model"], value["optim"])
    for key in ("precision", "callbacks"):
        if not isinstance(value.get(key, {}), Mapping):
            _refuse(f"snapshot.{key}", "is not a dict")
    _rng(value["rng"])
    for key in SNAPSHOT_COUNTERS:
        if not _count(value[key]):
            _refuse(f"snapshot.{key}", f"is {value[key]!r}, not an int >= 0")
    _stats(value.get("stats"), "snapshot.stats")
    return dict(value)


def _model_and_optim(model: Any, optim: Any) -> None:
    if not isinstance(model, Mapping) or not all(isinstance(v, Tensor) for v in model.values()):
        _refuse("snapshot.model", "is not a dict of tensors")
    if not isinstance(optim, Mapping) or not all(
        isinstance(optim.get(k), list) for k in ("optimizer_states", "lr_schedulers")
    ):
        _refuse("snapshot.optim", "is not a dict with the lists 'optimizer_states' and 'lr_schedulers'")
    if not all(
        isinstance(s, Mapping) and "state" in s and "param_groups" in s for s in optim["optimizer_states"]
    ):
        _refuse("snapshot.optim.optimizer_states", "holds an entry that is not an optimizer's state_dict()")


def _rng(rng: Any) -> None:
    """The RNG states as `surge.seed.rng_state` writes them."""
    py = rng.get("python") if isinstance(rng, Mapping) else None
    np_state = rng.get("numpy") if isinstance(rng, Mapping) else None
    ok = (
        isinstance(py, Mapping)
        and isinstance(py.get("state"), list | Tensor)  # (a list in older checkpoints)
        and isinstance(np_state, Mapping)
        and isinstance(np_state.get("keys"), Tensor)
        and isinstance(rng.get("torch"), Tensor)
        and rng["torch"].dtype == torch.uint8
    )
    if not ok:
        _refuse("snapshot.rng", "is not the RNG states surge writes (python, numpy, torch)")


def _describe(value: Any) -> str:
    if isinstance(value, Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return f"a {type(value).__name__}"
