"""The prediction loop: `predict_step` over each loader, gathered in dataset order across processes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..optim.manual import batch_only
from .evaluate import takes_dataloader_idx
from .module_mode import ModuleMode

if TYPE_CHECKING:
    from ..strategies import Strategy
    from .context import RunParts
    from .predict_state import PredictLoop


def run_prediction(
    parts: RunParts, loaders: Sequence[Iterable], limits: Sequence[int | float], state: PredictLoop
) -> list[Any]:
    """`predict_step` over each loader; a list of outputs (a list of lists with several loaders).
    `state` (begun by the Trainer) notes each batch's indices and keeps the predictions."""
    if sum(limits) == 0:
        return [] if len(loaders) == 1 else [[] for _ in loaders]  # as Lightning: no hook is called
    model, hooks, precision, strategy = parts.module, parts.hooks, parts.precision, parts.strategy
    step = batch_only(strategy.step_fn(model, "predict_step"), model.predict_step)
    pass_idx = len(loaders) > 1 and takes_dataloader_idx(model.predict_step)
    modes = ModuleMode(model)
    move = parts.move
    try:
        with parts.evaluation_mode():
            modes.to_eval(hooks, "on_predict_model_eval")
            hooks.call("on_predict_start")
            hooks.call("on_predict_epoch_start")
            for dl_idx, (loader, limit) in enumerate(zip(loaders, limits)):
                for batch_idx, batch in enumerate(loader):
                    if batch_idx >= limit:
                        break
                    if move is not None:
                        batch = move(batch, dl_idx)
                    extra = (dl_idx,) if pass_idx else ()
                    state.at_batch(dl_idx, batch_idx)
                    hooks.call("on_predict_batch_start", batch, batch_idx, *extra)
                    with precision.forward_context():
                        out = step(batch, batch_idx, *extra)
                    hooks.call("on_predict_batch_end", out, batch, batch_idx, *extra)
                    state.keep(out, dl_idx)
            hooks.call("on_predict_epoch_end")
            outputs = state.end()
            hooks.call("on_predict_end")
    finally:
        modes.restore()  # Lightning calls no `on_predict_model_train`
    if strategy.world_size > 1 and state.return_predictions and parts.semantics.predict_returns == "gathered":
        outputs = [_gather_in_order(strategy, preds, loader) for preds, loader in zip(outputs, loaders)]
    return outputs[0] if len(outputs) == 1 else outputs


def _gather_in_order(strategy: Strategy, preds: list[Any], loader: Any) -> list[Any]:
    """On rank zero, every rank's predictions, each sample once and in dataset order, re-batched
    like the loader; other ranks get []. Needs tensor predictions with the batch as dimension 0."""
    from ..data import ShardSampler

    gathered = strategy.all_gather_object([p.cpu() if isinstance(p, torch.Tensor) else p for p in preds])
    if not strategy.is_global_zero:
        return []
    sharded = isinstance(getattr(loader, "sampler", None), ShardSampler)
    if not sharded or not all(isinstance(p, torch.Tensor) for rank in gathered for p in rank):
        return [p for rank in gathered for p in rank]
    per_rank = [torch.cat(rank) if rank else None for rank in gathered]
    total = sum(t.shape[0] for t in per_rank if t is not None)
    template = next(t for t in per_rank if t is not None)
    merged = template.new_empty((total, *template.shape[1:]))
    world = len(per_rank)
    for rank, tensor in enumerate(per_rank):
        if tensor is not None:
            merged[rank::world] = tensor
    return list(merged.split(loader.batch_size or total))
