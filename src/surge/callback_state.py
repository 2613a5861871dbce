"""The callbacks' part of a checkpoint: their states by `state_key`, restored before the optimizers'
(as Lightning restores callbacks before the optimizer state) so that a callback that changed the
optimization (SWA's scheduler, finetuning's param groups) rebuilds it first and the saved state fits.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import CheckpointError

if TYPE_CHECKING:
    from .module import Module
    from .optim import Optimization


def save_callbacks(callbacks: list[Any], state: dict[str, Any]) -> None:
    state["callbacks"] = {cb.state_key: cb.state_dict() for cb in callbacks}


def restore_callbacks(callbacks: list[Any], ckpt: Mapping[str, Any], path: Path) -> None:
    """Load each callback's saved state; refuse a state whose callback this run lacks when that
    callback changed the optimization."""
    saved = ckpt.get("callbacks", {})
    _refuse_missing(saved, {cb.state_key for cb in callbacks}, path)
    for cb in callbacks:
        if cb.state_key in saved:
            with _naming(path, cb.state_key):
                cb.load_state_dict(saved[cb.state_key])


def restore_optimization(
    callbacks: list[Any], optim: Optimization | None, module: Module, ckpt: Mapping[str, Any], path: Path
) -> None:
    """Once the optimizers exist: let the restored callbacks rebuild what they added to them."""
    if optim is None:
        return
    saved = ckpt.get("callbacks", {})
    for cb in callbacks:
        if cb.state_key in saved and callable(getattr(cb, "restore_optimization", None)):
            with _naming(path, cb.state_key):
                cb.restore_optimization(optim.optimizers, optim.schedulers, module)
    optim.refresh_schedulers()


@contextmanager
def _naming(path: Path, key: str) -> Iterator[None]:
    """A callback's refusal of its saved state (or its raw error on a damaged one) as a
    CheckpointError naming the checkpoint and the state's key."""
    try:
        yield
    except (CheckpointError, KeyError, ValueError, TypeError) as err:
        text = str(err) if isinstance(err, CheckpointError) else f"{type(err).__name__}: {err}"
        raise CheckpointError(f"checkpoint {path}, callbacks[{key!r}]: {text}") from err


def _refuse_missing(saved: Mapping[str, Any], present: set[str], path: Path) -> None:
    for key, state in saved.items():
        reason = key not in present and _changed_optimization(state)
        if reason:
            raise CheckpointError(
                f"{path} was written with the callback {key}, which {reason}; this run has no {key}, so "
                f"it would train differently. Resume with the same callbacks (a {key} configured as before)."
            )


def _changed_optimization(state: Any) -> str | None:
    """Why a saved callback state (by its Lightning-compatible keys) needs its callback to resume."""
    if not isinstance(state, Mapping):
        return None
    if state.get("average") is not None or state.get("average_model_state") is not None:
        return "had begun stochastic weight averaging (SWALR replaced the scheduler)"
    if state.get("internal_optimizer_metadata"):
        return "freezes layers and adds them to the optimizer as param groups on its schedule"
    return None
