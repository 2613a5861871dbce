"""The state layout of a checkpoint: the run's stateful parts by name, the one function that builds
a checkpoint from them and the one that restores them, the model's restore, and finding a checkpoint.

A new stateful part is one entry in `state_parts`: its `save` writes its entries into the checkpoint
dict (the on-disk keys stay those of format 2), its `restore` reads them back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from ..checkpoint import advice
from ..checkpoint.callback_state import restore_callbacks, restore_optimization, save_callbacks
from ..checkpoint.layout import check_resumable
from ..checkpoint.values import check_state
from ..data.stateful_loader import loader_states
from ..datamodule import DATAMODULE_HPARAMS_KEY, saved_datamodule_state
from ..errors import (
    CheckpointError,
    IncompatibleCheckpointError,
    MisconfigurationError,
    UntrustedCheckpointError,
)
from ..module.hparams import plain, put_objects
from ..rank_zero import info, warn
from ..seed import rng_state
from ..version import __version__

if TYPE_CHECKING:
    from ..loops.fit import FitLoop
    from ..loops.fit_data import FitData
    from ..loops.hooks import Hooks
    from ..metrics.publisher import MetricsPublisher
    from ..metrics.results import Results
    from ..module import Module
    from ..optim import Optimization
    from ..precision import Precision
    from ..profiler.goodput import GoodputLedger
    from ..strategies.base import Strategy

# The parts a weights-only checkpoint holds (besides the epoch, the step and surge's own entry).
WEIGHTS_ONLY = ("model",)


class Part(NamedTuple):
    """One stateful part of a run: `save` adds its entries to a checkpoint dict, `restore` reads
    them back from a loaded one (None: what it saved is used elsewhere, e.g. the RNG state)."""

    save: Callable[[dict[str, Any]], None]
    restore: Callable[[Mapping[str, Any], Path], None] | None


@dataclass(frozen=True)
class Found:
    """A checkpoint `find_checkpoint` chose, and its state, read and verified once."""

    path: Path
    state: dict[str, Any]


@dataclass(frozen=True)
class RunObjects:
    """What a checkpoint is made of and restored into, handed over by the Trainer."""

    module: Module
    strategy: Strategy
    precision: Precision
    hooks: Hooks
    loop: FitLoop
    optim: Optimization | None  # None before a fit built the optimizers
    results: Results  # the training step's metrics of the current epoch
    callbacks: list[Any]
    datamodule: Any
    data: FitData | None  # the fit's loaders and accumulation (None before a fit)
    training_rng: dict[str, Any] | None  # set while validation runs inside fit
    publisher: MetricsPublisher | None
    goodput: GoodputLedger  # the job's time accounting (saved once a fit started it)


def state_parts(run: RunObjects) -> dict[str, Part]:
    """The run's stateful parts by name, in the order they are restored (the callbacks after the
    model and before the optimizers, which they may have changed; the loop and its window's
    gradients after the optimizers)."""
    precision = run.precision
    return {
        "model": _model_part(run.strategy, run.module),
        "callbacks": Part(
            lambda state: save_callbacks(run.callbacks, state),
            lambda ckpt, path: restore_callbacks(run.callbacks, ckpt, path),
        ),
        "optimizers": _optimizers_part(run),
        "precision": Part(
            lambda state: state.update(precision=precision.state_dict()),
            lambda ckpt, path: precision.load_state_dict(ckpt.get("precision", {})),
        ),
        "loop": _loop_part(run),
        "datamodule": _datamodule_part(run.datamodule),
        "rng": Part(lambda state: state.update(rng=run.training_rng or rng_state()), None),
        # read before the run directory is chosen (`continue_runs`), so nothing to restore here
        "loggers": Part(_loggers_save(run.publisher), None),
        "goodput": Part(run.goodput.save_into, run.goodput.restore_from),  # in surge's own entry
    }


def _loggers_save(publisher: MetricsPublisher | None) -> Callable[[dict[str, Any]], None]:
    def save(state: dict[str, Any]) -> None:
        if publisher is not None:
            state["loggers"] = publisher.runs_state()

    return save


def checkpoint_state(run: RunObjects, weights_only: bool = False) -> dict[str, Any]:
    """Everything a resumed run needs, in types that `torch.load(weights_only=True)` accepts."""
    loop, parts = run.loop, state_parts(run)
    state: dict[str, Any] = {"epoch": loop.epoch + int(loop.stopped_inside), "global_step": loop.global_step}
    for name in WEIGHTS_ONLY:
        parts[name].save(state)
    state.setdefault("surge", {}).update(version=__version__, torch_version=str(torch.__version__))
    if weights_only:
        check_state(state, _sources(run))
        return state
    for name, part in parts.items():
        if name not in WEIGHTS_ONLY:
            part.save(state)
    check_state(state, _sources(run))  # what a weights-only load refuses is refused now, by key and hook

    def after(cb: Any) -> None:
        check_state(state, f"{type(cb).__name__}.on_save_checkpoint")

    run.hooks.callbacks(
        "on_save_checkpoint", state, after=after
    )  # the callbacks, then the module (as Lightning)
    if "on_save_checkpoint" in run.hooks.module_fns:  # (a hook that does not run changes nothing)
        run.hooks.module("on_save_checkpoint", state)
        check_state(state, f"{_class_name(run.module)}.on_save_checkpoint")
    return state


def _class_name(module: Module) -> str:
    """The user's class name, also under FSDP2 (whose `fully_shard` makes `FSDP<Name>(FSDPModule, Name)`)."""
    cls = type(module)
    if any(base.__name__ == "FSDPModule" for base in cls.__bases__):
        cls = cls.__bases__[-1]
    return cls.__name__


def _sources(run: RunObjects) -> dict[str, str]:
    """Who fills each key of the gathered state, for a refusal to name."""
    model, data = _class_name(run.module), type(run.datamodule).__name__
    return {
        "state_dict": f"{model}.state_dict() (a buffer, or get_extra_state)",
        "hyper_parameters": f"{model}.save_hyperparameters()",
        "callbacks": "the callback's state_dict()",
        "datamodule": f"{data}.state_dict()",
        DATAMODULE_HPARAMS_KEY: f"{data}.save_hyperparameters()",
        "loop": "the train loader's state_dict(), or a value logged this epoch",
    }


def restore_modules(run: RunObjects, found: Found) -> None:
    """Before the optimizers exist (as Lightning): the module's `on_load_checkpoint` and weights, the
    datamodule's state, then the callbacks' `on_load_checkpoint` and states."""
    path, ckpt = found.path, found.state
    check_resumable(ckpt, path)
    run.hooks.module("on_load_checkpoint", ckpt)  # before anything loads: it may change the checkpoint
    parts = state_parts(run)
    for name in ("model", "datamodule"):
        parts[name].restore(ckpt, path)  # type: ignore[misc]
    run.hooks.callbacks("on_load_checkpoint", ckpt)  # (Lightning: before their `load_state_dict`)
    restore_callbacks(run.callbacks, ckpt, path)


def restore_training(run: RunObjects, found: Found) -> dict[str, Any] | None:
    """When the fit's loop is bound (after `restore_modules`): what the callbacks changed in the
    optimization, the optimizers, precision and loop; returns the RNG state to set when training
    starts (after the sanity check, so that it cannot disturb the sequence)."""
    path, ckpt = found.path, found.state
    restore_optimization(run.callbacks, run.optim, run.module, ckpt, path)
    parts = state_parts(run)
    for name in ("optimizers", "precision", "loop", "goodput"):
        parts[name].restore(ckpt, path)  # type: ignore[misc]
    info(f"Resuming from {path} at epoch {run.loop.epoch}, step {run.loop.global_step}")
    return ckpt.get("rng")


def restore_model(strategy: Strategy, module: Module, ckpt: Mapping[str, Any], path: Path) -> None:
    """Load a checkpoint's weights into `module` (a resumed fit and validate/test/predict alike);
    with `module.strict_loading` False, what did not match is left out and named in a warning."""
    try:
        problems = strategy.restore_model(module, ckpt, path, strict=module.strict_loading)
    except CheckpointError as err:
        raise advice.mismatched(err, ckpt, dict(module.hparams), type(module).__name__) from None
    if problems:
        warn(f"{path}: strict_loading=False, loaded the weights that match; " + "; ".join(problems))


def _model_part(strategy: Strategy, module: Module) -> Part:
    def save(state: dict[str, Any]) -> None:
        state["state_dict"] = strategy.model_state_dict(module)
        state["hyper_parameters"] = plain(dict(module.hparams))
        put_objects(module.hparams, state)  # classes and objects, pickled for a load that trusts the file

    return Part(save, lambda ckpt, path: restore_model(strategy, module, ckpt, path))


def _optimizers_part(run: RunObjects) -> Part:
    strategy, module, optim = run.strategy, run.module, run.optim

    def save(state: dict[str, Any]) -> None:
        if optim is not None:
            state.update(optim.state_dict())
            state["optimizer_states"] = strategy.optimizer_states(module, optim.optimizers)

    def restore(ckpt: Mapping[str, Any], path: Path) -> None:
        assert optim is not None, "a fit restores after building its optimizers"
        optim.load_state_dict(
            ckpt, lambda opts: strategy.restore_optimizers(module, opts, ckpt, path), source=str(path)
        )

    return Part(save, restore)


def _loop_part(run: RunObjects) -> Part:
    loop, strategy, data = run.loop, run.strategy, run.data

    def save(state: dict[str, Any]) -> None:
        state["loop"] = loop.state_dict()
        if data is None:
            return
        positions = loader_states(data.train, strategy, data.end_position)  # every rank's
        if positions is not None:
            state["loop"]["loader_states"] = positions
        data.say_if_inexact()
        if loop.batches_done and not loop.epoch_closed:  # inside the epoch: its metrics so far, every rank's
            state["loop"]["results"] = strategy.all_gather_object(run.results.state_dict())
        if loop.inside_window():
            _save_window(run, state["loop"])

    def restore(ckpt: Mapping[str, Any], path: Path) -> None:
        assert data is not None, "a fit restores its loop after asking for its loaders"
        _check_loop_state(ckpt["loop"], path, data.resume_limit())
        data.resume_position(ckpt["loop"], strategy, path)
        loop.load_state_dict(ckpt["loop"])
        max_epochs = (
            loop.context().settings.max_epochs
        )  # fewer than the checkpoint has done: Lightning's error
        if max_epochs is not None and max_epochs >= 0 and loop.epoch > max_epochs:
            raise MisconfigurationError(
                f"You restored a checkpoint with current_epoch={loop.epoch}, but you have set "
                f"Trainer(max_epochs={max_epochs}) ({path}); raise max_epochs to train on from it."
            )
        if ckpt["loop"].get("window_gradients") is not None:
            strategy.restore_window_gradients(run.module, ckpt["loop"]["window_gradients"], path)
            loop.keep_window_gradients()

    return Part(save, restore)


def _datamodule_part(datamodule: Any) -> Part:
    def save(state: dict[str, Any]) -> None:
        if datamodule is not None:
            state["datamodule"] = datamodule.state_dict()
            state["surge"]["datamodule_class"] = type(datamodule).__qualname__  # whose state it is
            if datamodule.hparams:  # for `load_from_checkpoint`, as Lightning
                state[DATAMODULE_HPARAMS_KEY] = plain(dict(datamodule.hparams))

    def restore(ckpt: Mapping[str, Any], path: Path) -> None:
        saved = saved_datamodule_state(ckpt, datamodule) if datamodule is not None else None
        if saved is not None:
            datamodule.load_state_dict(saved)

    return Part(save, restore)


def _save_window(run: RunObjects, loop_state: dict[str, Any]) -> None:
    """A checkpoint between micro-batches keeps the window's gradients so far, so the window goes on
    exactly; where the strategy cannot give them, the window restarts at its first micro-batch."""
    grads = run.strategy.window_gradients(run.module)
    if grads is not None:
        loop_state["window_gradients"] = grads
        return
    last = loop_state["batches_done"] - 1
    loop_state["batches_done"] = last - last % (run.data.window if run.data is not None else 1)
    loop_state.pop("results", None)  # the restarted window's micro-batches will be counted again
    warn(
        f"checkpoint written inside a gradient accumulation window (batch {last + 1} of the epoch) with "
        f"strategy={run.strategy.name!r}, which cannot save the window's gradients: a resume restarts the "
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


def find_checkpoint(
    ckpt_path: str | Path, load: Callable[[Path], dict[str, Any]], root_dir: Path, checkpoint_callback: Any
) -> Found | None:
    """The checkpoint for `ckpt_path`, read (by `load`) and verified once: itself, "best" (of
    `checkpoint_callback`), "last" (newest under `root_dir` and the callback's folder) or "auto"
    (like "last", but None when there is none, for a first run; an unreadable newest one is skipped,
    one of another layout refused)."""
    if ckpt_path not in ("best", "last", "auto"):
        path = Path(ckpt_path)
        if not path.is_file():
            nearby = newest_checkpoints(root_dir, checkpoint_callback, also=path.parent)
            raise advice.missing_file(ckpt_path, nearby)
        return _read(path, load, root_dir, checkpoint_callback)
    if ckpt_path == "best":
        cb = checkpoint_callback
        if cb is None or not cb.best_model_path:
            raise MisconfigurationError(
                'ckpt_path="best" needs a ModelCheckpoint that has saved a checkpoint.'
            )
        path = Path(cb.best_model_path)
        return Found(path, load(path))
    candidates = newest_checkpoints(root_dir, checkpoint_callback)
    if ckpt_path == "last":
        if not candidates:
            raise MisconfigurationError(
                f'ckpt_path="last": no checkpoint (*.ckpt) found under {root_dir}; use "auto" to '
                "start fresh when there is none."
            )
        return _read(candidates[0], load, root_dir, checkpoint_callback)
    for path in candidates:
        try:
            return Found(path, load(path))
        except IncompatibleCheckpointError:
            raise  # whole, but of another layout: starting afresh would drop the run's progress
        except CheckpointError as err:
            warn(f'ckpt_path="auto": skipping {path}: {err}')
    return None


def _read(
    path: Path, load: Callable[[Path], dict[str, Any]], root_dir: Path, checkpoint_callback: Any
) -> Found:
    """The checkpoint at `path`; one that does not read names "auto" and the newest other one."""
    try:
        return Found(path, load(path))
    except (UntrustedCheckpointError, IncompatibleCheckpointError):
        raise
    except CheckpointError as err:
        others = [p for p in newest_checkpoints(root_dir, checkpoint_callback, also=path.parent) if p != path]
        raise advice.unreadable(err, others) from None


def newest_checkpoints(
    root_dir: str | Path, checkpoint_callback: Any = None, also: Path | None = None
) -> list[Path]:
    """Checkpoints under the checkpoint callback's folder and the root dir (and `also`, if it is a
    folder), newest first."""
    roots = {Path(root_dir)} | ({also} if also is not None else set())
    cb = checkpoint_callback
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
