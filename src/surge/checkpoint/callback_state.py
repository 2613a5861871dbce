"""The callbacks' part of a checkpoint: their states by `state_key`, restored before the optimizers'
(as Lightning restores callbacks before the optimizer state) so that a callback that changed the
optimization (SWA's scheduler, finetuning's param groups) rebuilds it first and the saved state fits.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CheckpointError
from ..rank_zero import warn

if TYPE_CHECKING:
    from ..module import Module
    from ..optim import Optimization


def save_callbacks(callbacks: list[Any], state: dict[str, Any]) -> None:
    state["callbacks"] = {cb.state_key: cb.state_dict() for cb in callbacks}


def restore_callbacks(callbacks: list[Any], ckpt: Mapping[str, Any], path: Path) -> None:
    """Load each callback's saved state; refuse a state whose callback this run lacks when that
    callback changed the optimization, and say which saved states no callback takes back."""
    saved = _by_current_keys(callbacks, ckpt.get("callbacks", {}))
    present = {cb.state_key for cb in callbacks}
    _refuse_missing(saved, present, path)
    for cb in callbacks:
        if cb.state_key in saved:
            with _naming(path, cb.state_key):
                cb.load_state_dict(saved[cb.state_key])
    left = sorted(key for key, state in saved.items() if key not in present and state)
    if left:
        warn(
            f"{path} holds the state of callbacks this run does not have, so it is not restored: "
            f"{', '.join(left)}. Pass the same callbacks, configured as before, to continue their state."
        )


def _by_current_keys(callbacks: list[Any], saved: Mapping[str, Any]) -> dict[str, Any]:
    """`saved` with a state written under an earlier key of a callback moved to its `state_key`:
    surge 0.1's own keys for ModelCheckpoint and EarlyStopping (before they took Lightning's), and
    the class name (Lightning's legacy key)."""
    moved = dict(saved)
    for cb in callbacks:
        for old in _earlier_keys(cb):
            if cb.state_key not in moved and old in moved and old != cb.state_key:
                moved[cb.state_key] = moved.pop(old)
    return moved


def _earlier_keys(cb: Any) -> list[str]:
    name, keys = type(cb).__name__, [type(cb).__qualname__]
    if name == "ModelCheckpoint":
        timed = f", train_time_interval={cb.train_time_interval}" if cb.train_time_interval else ""
        keys.insert(0, f"ModelCheckpoint{{monitor={cb.monitor!r}, mode={cb.mode!r}, every_n_train_steps="
                    f"{cb.every_n_train_steps}, every_n_epochs={cb.every_n_epochs}{timed}}}")  # fmt: skip
    elif name == "EarlyStopping":
        keys.insert(0, f"EarlyStopping{{monitor={cb.monitor!r}, mode={cb.mode!r}}}")
    return keys


def restore_optimization(
    callbacks: list[Any], optim: Optimization | None, module: Module, ckpt: Mapping[str, Any], path: Path
) -> None:
    """Once the optimizers exist: let the restored callbacks rebuild what they added to them."""
    if optim is None:
        return
    saved = _by_current_keys(callbacks, ckpt.get("callbacks", {}))
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
