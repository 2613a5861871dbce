"""The evaluation loop: validation (also inside fit and as the sanity check) and test."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from ..errors import MisconfigurationError
from ..metrics.results import Results
from ..module.log_hooks import EpochLogs, NoLogs
from ..optim.manual import batch_only
from .module_mode import ModuleMode

if TYPE_CHECKING:
    from .context import RunParts


def takes_dataloader_idx(fn: Any) -> bool:
    """Whether a step method accepts a third `dataloader_idx` argument."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return len(params) >= 3 or any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params.values())


def run_evaluation(
    parts: RunParts,
    stage: str,
    loaders: Sequence[Iterable],
    limits: Sequence[int | float],
    global_step: int,
    sanity: bool = False,
    seen: list[int] | None = None,
) -> list[dict[str, float]]:
    """Run `{stage}_step` over each loader; returns one dict of epoch metrics per loader.

    Metrics are exact weighted means over every sample seen (across processes too). With several
    loaders, names get a `/dataloader_idx_{i}` suffix, as in Lightning. Step values logged
    (`on_step=True`) reach the loggers after each batch, as in Lightning, at the batch's number among
    those its loader ran (`seen`, counted on while the loaders stay; fresh: from 0), without an epoch.
    """
    seen = [0] * len(loaders) if seen is None else seen
    if sum(limits) == 0:
        return []  # no batch to run: no hook is called either (as in Lightning)
    model, hooks, strategy = parts.module, parts.hooks, parts.strategy
    hook = "validation" if stage == "validate" else stage
    step = batch_only(strategy.step_fn(model, f"{hook}_step"), getattr(model, f"{hook}_step"))
    pass_idx = len(loaders) > 1 and takes_dataloader_idx(getattr(model, f"{hook}_step"))
    previous_results = model._results
    modes = ModuleMode(model)
    sem = parts.semantics
    new_results = partial(
        Results, stage, strategy.reducer, sem.epoch_reduces_unsynced, sem.uncalled_metric_step
    )
    all_results = [new_results() for _ in loaders]
    epochs: list[dict[str, float]] = []  # with several loaders: each one's epoch values, read at its end
    ran: list[bool] = []
    try:
        with parts.evaluation_mode():
            modes.to_eval(hooks, f"on_{hook}_model_eval")
            # what the start and end hooks log: no loader's (several: under no suffix), as Lightning's
            shared = all_results[0] if len(loaders) == 1 else new_results()
            _start_evaluation(parts, hook, shared, all_results, global_step)
            for dl_idx, (loader, limit) in enumerate(zip(loaders, limits)):
                results, key = all_results[dl_idx], _loader_key(all_results[dl_idx], dl_idx, len(loaders))
                model._attach(results=results)
                parts.publisher.follow_evaluation(results, key)  # each batch's step values, when read
                batches = _run_loader(
                    parts, hook, step, loader, limit, dl_idx, pass_idx, all_results, seen, sanity
                )
                ran.append(batches > 0)
                parts.publisher.follow_evaluation(None)
                _keep_step_values(parts, results, key)
                if len(loaders) > 1:  # as Lightning: a loader's epoch values are computed at its end
                    epochs.append(_loader_epoch(all_results, dl_idx))  # host read (a sync across processes)
                    if not sanity and dl_idx < len(loaders) - 1:
                        _show_epoch(parts, results, all_results, epochs[dl_idx], global_step)
            metrics = _end_evaluation(parts, hook, all_results, shared, epochs, global_step, sanity)
    finally:
        parts.publisher.follow_evaluation(None)
        model._attach(results=previous_results)
        modes.restore(hooks, f"on_{hook}_model_train")
    # as Lightning's list: the first loader's values, then those of each later loader that ran a batch
    return [m for i, m in enumerate(metrics) if i == 0 or ran[i]]


def _start_evaluation(
    parts: RunParts, hook: str, shared: Results, all_results: list[Results], global_step: int
) -> None:
    """The evaluation's start hooks, what they log per epoch into `shared` (as Lightning's: what
    `on_{hook}_start` logged shows from there, unless inside a training epoch)."""
    model, hooks = parts.module, parts.hooks
    model._attach(results=EpochLogs(f"on_{hook}_start", shared))
    hooks.call(f"on_{hook}_start")
    if shared.slots and not parts.publisher.in_training_epoch():  # (a host read)
        _show_epoch(parts, shared, all_results, shared.read_epoch(), global_step)
    model._attach(results=EpochLogs(f"on_{hook}_epoch_start", shared))
    hooks.call(f"on_{hook}_epoch_start")


def _run_loader(
    parts: RunParts,
    hook: str,
    step: Any,
    loader: Iterable,
    limit: int | float,
    dl_idx: int,
    pass_idx: bool,
    all_results: list[Results],
    seen: list[int],
    sanity: bool,
) -> int:
    """One loader's batches, up to `limit`: the batch hooks around the step, its step values logged.
    Returns how many batches ran."""
    hooks, precision, move, results = parts.hooks, parts.precision, parts.move, all_results[dl_idx]
    ran = 0
    for batch_idx, batch in enumerate(loader):
        if batch_idx >= limit:
            break
        if move is not None:
            batch = move(batch, dl_idx)
        results.batch = batch
        extra = (dl_idx,) if pass_idx else ()
        hooks.call(f"on_{hook}_batch_start", batch, batch_idx, *extra)
        with precision.forward_context():
            out = step(batch, batch_idx, *extra)
        marks = results.synced_step_marks()
        read = _show_synced_steps(parts, results, all_results, dl_idx) if marks else None
        hooks.call(f"on_{hook}_batch_end", out, batch, batch_idx, *extra)
        if results.synced_step_marks() != marks:  # the end hooks logged synced step values: read again
            read = _show_synced_steps(parts, results, all_results, dl_idx)
        _log_step(parts, results, all_results, dl_idx, seen, sanity, read)
        ran += 1
    return ran


def _show_synced_steps(
    parts: RunParts, results: Results, all_results: list[Results], i: int
) -> dict[str, float] | None:
    """Where the batch logged step values with `sync_dist` on several processes: all its step
    values read now (a collective, as Lightning reduces them as they are logged), so its end hooks
    see the synced ones in `logged_metrics` and `progress_bar_metrics`. None otherwise (no read)."""
    if not results.syncs_step_values():
        return None
    values = results.read_step()
    if len(all_results) > 1:
        values = {_suffixed(k, i, results): v for k, v in values.items()}
    flags = _suffixed_flags(results, all_results)
    parts.publisher.keep_eval_steps(
        {k: torch.tensor(v) for k, v in values.items() if flags[k][1]},
        {k: torch.tensor(v) for k, v in values.items() if flags[k][0]},
    )
    return values


def _end_evaluation(
    parts: RunParts,
    hook: str,
    all_results: list[Results],
    epoch_end_results: Results,
    epochs: list[dict[str, float]],
    global_step: int,
    sanity: bool,
) -> list[dict[str, float]]:
    """The evaluation's epoch end: its hook, the metrics read and shown, and sent to the loggers
    unless a sanity check (whose end clears what it showed, as Lightning's; with several loaders
    it shows only what its epoch's start and end logged, as Lightning's)."""
    model, hooks = parts.module, parts.hooks
    model._attach(results=EpochLogs(f"on_{hook}_epoch_end", epoch_end_results))
    epoch_end_results.batch = None  # as Lightning: a mean logged at the epoch's end has weight 1
    only_shared = sanity and len(all_results) > 1  # (as Lightning: several loaders' never show then)
    _show_before_epoch_end(parts, hook, all_results, epochs, epoch_end_results, global_step, only_shared)
    hooks.call(f"on_{hook}_epoch_end")
    metrics = _collect(all_results, epochs, epoch_end_results)  # host read: evaluation end
    for r in [*all_results, epoch_end_results]:
        r.reset()  # logged torchmetrics Metrics start the next evaluation empty
    flags: dict[str, tuple[bool, bool, str]] = {}
    for r in [*all_results, epoch_end_results]:
        flags.update(_suffixed_flags(r, all_results))
    merged = {k: v for m in metrics for k, v in m.items()}
    if sanity and len(all_results) > 1:  # as Lightning: only what the epoch's end logged shows
        merged = {k: v for k, v in merged.items() if k in epoch_end_results.flags()}
    parts.publisher.publish(merged, flags, step=global_step, evaluation=True, to_loggers=not sanity)
    model._attach(results=NoLogs(f"on_{hook}_end"))
    hooks.call(f"on_{hook}_end")
    # as Lightning's: what validate() and test() return is what goes to the loggers (`logger=True`)
    return [{k: v for k, v in m.items() if flags.get(k, (False, True, k))[1]} for m in metrics]


def _show_before_epoch_end(
    parts: RunParts,
    hook: str,
    all_results: list[Results],
    epochs: list[dict[str, float]],
    epoch_end: Results,
    global_step: int,
    only_shared: bool,
) -> None:
    """Where a callback or the module has an `on_{hook}_epoch_end`: the epoch's values logged so
    far shown in `callback_metrics` and `logged_metrics` before it runs (not to the loggers), as
    Lightning reduces them before that hook (the sanity check's too, which its end clears;
    `only_shared`: only what the epoch's start logged)."""
    name = f"on_{hook}_epoch_end"
    if not (parts.hooks.callback_fns.get(name) or name in parts.hooks.module_fns):
        return
    metrics = _collect(all_results, epochs, epoch_end)  # host read (a sync across processes): evaluation end
    flags: dict[str, tuple[bool, bool, str]] = {}
    for r in [*all_results, epoch_end]:
        flags.update(_suffixed_flags(r, all_results))
    merged = {k: v for m in metrics for k, v in m.items()}
    if only_shared:
        merged = {k: v for k, v in merged.items() if k in epoch_end.flags()}
    parts.publisher.publish(merged, flags, step=global_step, evaluation=True, to_loggers=False)


def _loader_key(results: Results, dl_idx: int, loaders: int) -> Callable[[str], str]:
    """The name a loader's value shows under: `/dataloader_idx_{i}` added with several loaders
    (unless logged with `add_dataloader_idx=False`)."""
    if loaders == 1:
        return str
    return lambda k: _suffixed(k, dl_idx, results)


def _show_epoch(
    parts: RunParts, results: Results, all_results: list[Results], values: dict[str, float], global_step: int
) -> None:
    """Epoch `values` of `results` (under their shown names) in the metrics, not to the loggers:
    what an evaluation's start hooks logged, or a loader's once it has ended, as Lightning shows them."""
    flags = _suffixed_flags(results, all_results)
    parts.publisher.publish(values, flags, step=global_step, evaluation=True, to_loggers=False)


def _loader_epoch(all_results: list[Results], i: int) -> dict[str, float]:
    """Loader `i` of several has ended: its epoch values under their shown names (a host read, a
    sync across processes), read once, as Lightning computes them then (a torchmetrics `Metric`
    logged by several loaders shows, for each, what it held at that loader's end)."""
    results = all_results[i]
    return {_suffixed(k, i, results): v for k, v in results.read_epoch().items()}


def _keep_step_values(parts: RunParts, results: Results, key: Callable[[str], str]) -> None:
    """The loader's latest `on_step=True` values for `logged_metrics` and the progress bar (the
    sanity check's too, as Lightning's: its end clears them; synced ones are kept as each batch
    reads them, `_show_synced_steps`)."""
    logged, prog_bar = results.step_values(), results.step_values(prog_bar=True)
    if logged or prog_bar:
        parts.publisher.keep_eval_steps(
            {key(k): v for k, v in logged.items()}, {key(k): v for k, v in prog_bar.items()}
        )


def _collect(
    all_results: list[Results], epochs: list[dict[str, float]], epoch_end: Results
) -> list[dict[str, float]]:
    """Each loader's epoch values (several loaders: as read at its end, `epochs`) with those the
    epoch's end logged."""
    shared = epoch_end.read_epoch() if epoch_end not in all_results else {}
    if len(all_results) == 1:
        return [{**all_results[0].read_epoch(), **shared}]
    owner: dict[str, int] = {}
    for i, r in enumerate(all_results):
        for key in r.unsuffixed_keys():
            if owner.setdefault(key, i) != i:
                raise MisconfigurationError(
                    f"self.log({key!r}, add_dataloader_idx=False) was called with dataloaders {owner[key]} "
                    f"and {i}: use a different name for each dataloader, or add_dataloader_idx=True."
                )
    return [{**epochs[i], **shared} for i in range(len(all_results))]


def _log_step(
    parts: RunParts,
    results: Results,
    all_results: list[Results],
    i: int,
    seen: list[int],
    sanity: bool,
    read: dict[str, float] | None,
) -> None:
    """After loader `i`'s batch: its step values (`read` before its end hooks, if they were) to the
    loggers (if any), and the batch counted (not in the sanity check)."""
    if sanity:
        return
    if results.logs_step_values():  # host read: only when the user logs evaluation step values
        values = read
        if values is None:
            values = results.read_step()
            if len(all_results) > 1:
                values = {_suffixed(k, i, results): v for k, v in values.items()}
        parts.publisher.log_evaluation_step(values, _suffixed_flags(results, all_results), seen[i])
    seen[i] += 1


def _suffixed(key: str, i: int, results: Results) -> str:
    return key if key in results.unsuffixed_keys() else f"{key}/dataloader_idx_{i}"


def _suffixed_flags(results: Results, all_results: list[Results]) -> dict[str, tuple[bool, bool, str]]:
    flags = results.flags()
    if len(all_results) == 1 or results not in all_results:
        return flags
    i = all_results.index(results)
    keep = results.unsuffixed_keys()
    return {
        _suffixed(k, i, results): (p, lg, name if k in keep else f"{name}/dataloader_idx_{i}")
        for k, (p, lg, name) in flags.items()
    }
