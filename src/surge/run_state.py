"""The state layout of a checkpoint: what a run saves, how it is restored, and finding one."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .errors import CheckpointError, MisconfigurationError
from .hparams import plain
from .loader_state import inexact_resume_reason
from .rank_zero import info, warn
from .seed import rng_state
from .version import __version__

if TYPE_CHECKING:
    from .trainer import Trainer


def checkpoint_state(trainer: Trainer, weights_only: bool = False) -> dict[str, Any]:
    """Everything a resumed run needs, in types that `torch.load(weights_only=True)` accepts."""
    module, loop = trainer._module, trainer.fit_loop
    state: dict[str, Any] = {
        "epoch": loop.epoch,
        "global_step": loop.global_step,
        "state_dict": trainer._strategy.model_state_dict(module),
        "hyper_parameters": plain(dict(module.hparams)),
        "surge": {"version": __version__, "torch_version": str(torch.__version__)},
    }
    if weights_only:
        return state
    state["loop"] = loop.state_dict()
    _say_if_inexact(trainer)
    if loop.batches_done and not loop.epoch_closed:  # inside the epoch: its metrics so far, every rank's
        state["loop"]["results"] = trainer._strategy.all_gather_object(trainer._train_results.state_dict())
    if loop.inside_window():
        _save_window(trainer, state["loop"])
    if trainer._optim is not None:
        state.update(trainer._optim.state_dict())
        state["optimizer_states"] = trainer._strategy.optimizer_states(module, trainer._optim.optimizers)
    state["precision"] = trainer._precision.state_dict()
    state["callbacks"] = {cb.state_key: cb.state_dict() for cb in trainer.callbacks}
    if trainer.datamodule is not None:
        state["datamodule"] = trainer.datamodule.state_dict()
    state["rng"] = trainer.training_rng or rng_state()
    trainer._hooks.module("on_save_checkpoint", state)
    trainer._hooks.callbacks("on_save_checkpoint", state)
    return state


def restore_state(trainer: Trainer, path: Path) -> dict[str, Any] | None:
    """Load `path` into the model, optimizers, loop and callbacks; returns the RNG state to set
    when training starts (after the sanity check, so that it cannot disturb the sequence)."""
    ckpt = trainer._strategy.load_checkpoint(path)
    if "loop" not in ckpt:
        raise CheckpointError(f"{path} holds weights only (no training state); it cannot resume a fit")
    strategy, module = trainer._strategy, trainer._module
    problems = strategy.restore_model(module, ckpt, path, strict=module.strict_loading)
    if problems:
        warn(f"{path}: strict_loading=False, loaded the weights that match; " + "; ".join(problems))
    trainer._optim.load_state_dict(
        ckpt, lambda opts: strategy.restore_optimizers(module, opts, ckpt, path), source=str(path)
    )
    trainer._precision.load_state_dict(ckpt.get("precision", {}))
    loop = trainer.fit_loop
    _check_loop_state(ckpt["loop"], path, trainer.num_training_batches)
    loop.load_state_dict(ckpt["loop"])
    if ckpt["loop"].get("window_gradients") is not None:
        strategy.restore_window_gradients(module, ckpt["loop"]["window_gradients"], path)
        loop._keep_grads = True
    saved = ckpt.get("callbacks", {})
    for cb in trainer.callbacks:
        if cb.state_key in saved:
            cb.load_state_dict(saved[cb.state_key])
    if trainer.datamodule is not None and "datamodule" in ckpt:
        trainer.datamodule.load_state_dict(ckpt["datamodule"])
    trainer._hooks.module("on_load_checkpoint", ckpt)
    trainer._hooks.callbacks("on_load_checkpoint", ckpt)
    info(f"Resuming from {path} at epoch {trainer.current_epoch}, step {trainer.global_step}")
    return ckpt.get("rng")


def _say_if_inexact(trainer: Trainer) -> None:
    """Once a fit: a checkpoint that cannot resume the data exactly says so when it is written."""
    loop = trainer.fit_loop
    if loop.inexact_said is None:
        loop.inexact_said = inexact_resume_reason(trainer._train_loader) or ""
        if loop.inexact_said:
            warn(f"this checkpoint will not resume exactly: {loop.inexact_said}")


def _save_window(trainer: Trainer, loop_state: dict[str, Any]) -> None:
    """A checkpoint between micro-batches keeps the window's gradients so far, so the window goes on
    exactly; where the strategy cannot give them, the window restarts at its first micro-batch."""
    grads = trainer._strategy.window_gradients(trainer._module)
    if grads is not None:
        loop_state["window_gradients"] = grads
        return
    last = loop_state["batches_done"] - 1
    loop_state["batches_done"] = last - last % trainer._cfg.accumulate_grad_batches
    loop_state.pop("results", None)  # the restarted window's micro-batches will be counted again
    warn(
        f"checkpoint written inside a gradient accumulation window (batch {last + 1} of the epoch) with "
        f"strategy={trainer._strategy.name!r}, which cannot save the window's gradients: a resume restarts the "
        f"window at batch {loop_state['batches_done']}, and random draws in those steps (e.g. dropout) will differ. "
        "Checkpoints written at optimizer steps (ModelCheckpoint's) resume exactly."
    )


def _check_loop_state(loop: Any, path: Path, batches_per_epoch: int | float) -> None:
    """A position this run's epoch cannot hold is refused before any state is changed (the entry's
    layout is checked when the file is read)."""
    if not loop["epoch_done"] and loop["batches_done"] > batches_per_epoch:
        raise CheckpointError(
            f"{path} stopped after batch {loop['batches_done']} of epoch {loop['epoch']}, but this run's epoch has "
            f"{batches_per_epoch} batches: resume with the dataloader (and limit_train_batches) it was saved with"
        )


def find_checkpoint(trainer: Trainer, ckpt_path: str | Path) -> Path | None:
    """A path for `ckpt_path`: itself, "best", "last" (newest under the root dir) or "auto"
    (like "last", but None when there is none, for a first run; an unreadable newest one is skipped)."""
    if ckpt_path not in ("best", "last", "auto"):
        path = Path(ckpt_path)
        if not path.is_file():
            raise MisconfigurationError(f"ckpt_path={str(ckpt_path)!r} is not valid: no such file.")
        return path
    if ckpt_path == "best":
        cb = trainer.checkpoint_callback
        if cb is None or not cb.best_model_path:
            raise MisconfigurationError(
                'ckpt_path="best" needs a ModelCheckpoint that has saved a checkpoint.'
            )
        return Path(cb.best_model_path)
    candidates = newest_checkpoints(trainer)
    if ckpt_path == "last":
        if not candidates:
            raise MisconfigurationError(
                f'ckpt_path="last": no checkpoint (*.ckpt) found under {trainer.default_root_dir}; use "auto" to '
                "start fresh when there is none."
            )
        return candidates[0]
    for path in candidates:
        try:
            trainer._strategy.load_checkpoint(path)
        except CheckpointError as err:
            warn(f'ckpt_path="auto": skipping {path}: {err}')
            continue
        return path
    return None


def newest_checkpoints(trainer: Trainer) -> list[Path]:
    """Checkpoints under the checkpoint dir and the root dir, newest first."""
    roots = {Path(trainer.default_root_dir)}
    cb = trainer.checkpoint_callback
    if cb is not None and cb.dirpath is not None:
        roots.add(Path(cb.dirpath))
    found = {p for root in roots if root.is_dir() for p in root.rglob("*.ckpt") if p.is_file()}
    keyed = [(key, p) for p in found if (key := _newness(p)) is not None]
    return [p for _, p in sorted(keyed, key=lambda kp: kp[0], reverse=True)]


def _newness(path: Path) -> tuple[int, bool] | None:
    """The sort key of a found checkpoint; None when it vanished (another run's top-k removed it)."""
    try:
        return path.stat().st_mtime_ns, path.name == "last.ckpt"
    except FileNotFoundError:
        return None
