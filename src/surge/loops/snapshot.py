"""What a rollback keeps and puts back: the state a checkpoint resumes from, held in memory.

A snapshot holds what a checkpoint holds of the run's state, less what the loop keeps going (the
loader's position, the epoch, the logged metrics): the module's state, the optimizers' and
schedulers' (`Optimization.state_dict`), the precision's (a GradScaler's scale), the RNG, the step,
and the callbacks' states, collected as a checkpoint collects them (`save_callbacks`). A callback
whose state records what a rollback does not undo (files written, time spent) keeps it
(`KEEP_THEIR_STATE`; a user's callback says so with `rollback_restores = False`). Tensors are cloned where they live (no host copy,
no sync on an accelerator). A snapshot loaded from a checkpoint is checked against this run before
anything of it is used (`check_loaded`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..callbacks.checkpoint import ModelCheckpoint
from ..callbacks.finetuning import BaseFinetuning
from ..callbacks.timer import Timer
from ..checkpoint.callback_state import save_callbacks
from ..errors import CheckpointError, MisconfigurationError
from ..seed import rng_state, set_rng_state
from .optimizer_restore import restore_optimizer

if TYPE_CHECKING:
    from ..optim import Optimization
    from .context import RunParts

# Callbacks whose state a rollback keeps: ModelCheckpoint's is the files written (they stay, and its
# state is applied only at a fit's setup), Timer's the time spent, BaseFinetuning's changes only at an
# epoch's start (which no rollback crosses) and its load is a resume's.
KEEP_THEIR_STATE = (ModelCheckpoint, Timer, BaseFinetuning)


def restored_by_rollback(callback: Any) -> bool:
    """Whether a rollback puts `callback`'s state back (a callback opts out with
    `rollback_restores = False`)."""
    return not isinstance(callback, KEEP_THEIR_STATE) and getattr(callback, "rollback_restores", True)


class Snapshots:
    """Takes and restores the snapshots of one fit."""

    def __init__(self, parts: RunParts, optim: Optimization, callbacks: Sequence[Any]) -> None:
        self.parts, self.optim = parts, optim
        self.callbacks = [cb for cb in callbacks if restored_by_rollback(cb)]

    def take(self, stats: Tensor | None, step: int, epoch: int, batches_done: int) -> dict[str, Any]:
        """The run's state now (a judged one: the caller checked it)."""
        return {
            "model": {k: v.detach().clone() for k, v in self.parts.module.state_dict().items()},
            "optim": copy.deepcopy(self.optim.state_dict()),
            "precision": copy.deepcopy(self.parts.precision.state_dict()),
            "rng": rng_state(),
            "stats": stats.clone() if stats is not None else None,
            "global_step": step,
            "epoch": epoch,
            "batches_done": batches_done,
            "callbacks": self._callback_states(),
        }

    def _callback_states(self) -> dict[str, Any]:
        """Each callback's `state_dict()`, as a checkpoint collects them, copied; a state that
        cannot be copied is refused by the callback's name (the first snapshot is taken before
        any training step)."""
        states: dict[str, Any] = {}
        save_callbacks(self.callbacks, states)
        kept = {}
        for key, state in states["callbacks"].items():
            try:
                kept[key] = copy.deepcopy(state)
            except Exception as err:
                raise MisconfigurationError(
                    f"SpikeGuard: the callback {key}'s state_dict() cannot be copied ({type(err).__name__}: {err}), "
                    "so a rollback could not restore it. Return tensors and plain values from its state_dict(), "
                    "or set rollback_restores = False on the callback when its state must survive a rollback."
                ) from err
        return kept

    def restore(self, snap: Mapping[str, Any]) -> None:
        """Model, optimizers, schedulers, precision, RNG and callbacks as `snap` holds them."""
        with torch.no_grad():
            self.parts.module.load_state_dict(snap["model"])
        for opt, saved in zip(self.optim.optimizers, snap["optim"]["optimizer_states"]):
            restore_optimizer(opt, saved)
        for config, saved in zip(self.optim.schedulers, snap["optim"]["lr_schedulers"]):
            config.scheduler.load_state_dict(copy.deepcopy(saved))
        self.parts.precision.load_state_dict(copy.deepcopy(snap["precision"]))
        set_rng_state(snap["rng"])
        saved_callbacks = snap.get("callbacks", {})
        for cb in self.callbacks:
            if cb.state_key in saved_callbacks:
                cb.load_state_dict(copy.deepcopy(saved_callbacks[cb.state_key]))

    def check_loaded(self, snap: Mapping[str, Any]) -> None:
        """A snapshot a checkpoint brought, against this run, before it is used: the module's
        entries, shapes and dtypes, finite weights, as many optimizers and schedulers; a
        CheckpointError names the entry."""
        where = "the checkpoint's SpikeGuard state, snapshot"
        model = snap["model"]
        own = self.parts.module.state_dict()
        if set(model) != set(own):
            missing, extra = sorted(set(own) - set(model)), sorted(set(model) - set(own))
            raise CheckpointError(
                f"{where}['model'] does not fit {type(self.parts.module).__name__}: missing {missing[:5]}, "
                f"unexpected {extra[:5]}. Resume with the model the run was saved with."
            )
        for name, value in model.items():
            mine = own[name]
            if not isinstance(value, Tensor) or value.shape != mine.shape or value.dtype != mine.dtype:
                got = (
                    f"{tuple(value.shape)} {value.dtype}"
                    if isinstance(value, Tensor)
                    else type(value).__name__
                )
                raise CheckpointError(
                    f"{where}['model'][{name!r}] is {got}, but the model's is {tuple(mine.shape)} {mine.dtype}."
                )
            if value.is_floating_point() and not bool(value.isfinite().all()):  # a resume: read once
                raise CheckpointError(
                    f"{where}['model'][{name!r}] holds inf/NaN: a snapshot is only of a good state."
                )
        optim = snap["optim"]
        for key, have in (
            ("optimizer_states", self.optim.optimizers),
            ("lr_schedulers", self.optim.schedulers),
        ):
            saved = optim.get(key) if isinstance(optim, Mapping) else None
            if not isinstance(saved, list) or len(saved) != len(have):
                count = len(saved) if isinstance(saved, list) else type(saved).__name__
                raise CheckpointError(
                    f"{where}['optim'][{key!r}] holds {count} entries, but this run has {len(have)}: resume with "
                    "the configure_optimizers() the run was saved with."
                )
