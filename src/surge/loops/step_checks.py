"""What the training step checks of the user's code, and how it explains a failure where it happened."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torch import Tensor

from ..errors import MisconfigurationError, SurgeRuntimeError
from ..launch.main_guard import GUARD, start_method, unguarded_line
from ..rank_zero import warn

if TYPE_CHECKING:
    from .context import FitContext


def explain_fetch_error(err: BaseException, epoch: int, batch_idx: int, loader: Any) -> None:
    """Say where in the run the data failed (the traceback from the worker is kept below it)."""
    workers = getattr(loader, "num_workers", 0)
    where = f"in one of its {workers} worker processes" if workers else "in this process"
    note = f"surge: the train dataloader failed {where} while fetching batch {batch_idx} of epoch {epoch}"
    index = failing_index(err)
    if index is not None:
        note += f"; the sample that raised is dataset[{index!r}]"
    elif workers and (unguarded := _unguarded_script(loader, err)) is not None:
        note += unguarded
    elif workers:
        note += "; with num_workers=0 surge also names the sample's index"
    if hasattr(err, "add_note"):  # Python >= 3.11
        err.add_note(note)


def _unguarded_script(loader: Any, err: BaseException) -> str | None:
    """A worker that died while it started, under 'spawn'/'forkserver', from a script whose fit runs at
    its top level: the worker imported the script and ran the fit again (it says so on its stderr)."""
    method = start_method(loader)
    if method == "fork" or "exited unexpectedly" not in str(err):
        return None
    found = unguarded_line()
    if found is None:
        return None
    path, line = found
    return (
        f". The workers start with {method!r}, so each imports the script again, and {path}:{line} runs at "
        f"the script's top level: put the script's Trainer calls under {GUARD} (each worker then only "
        "imports the script)"
    )


def explain_backward_error(err: RuntimeError, loss: Tensor, epoch: int, batch_idx: int) -> None:
    """A loss that stopped requiring grad after the first batch gets the clear error the first
    batch would have given."""
    if not loss.requires_grad:
        raise SurgeRuntimeError(
            f"training_step's loss at batch {batch_idx} of epoch {epoch} does not require grad: it was "
            "detached, computed under torch.no_grad(), or no trainable parameter took part."
        ) from err


def failing_index(err: BaseException) -> Any:
    """The index being fetched when the dataset raised (in-process loading): torch's map-style
    fetcher holds it in a local of the frame that called `dataset[idx]`."""
    tb, index = err.__traceback__, None
    while tb is not None:
        code = tb.tb_frame.f_code
        if (
            code.co_filename.endswith(("_utils/fetch.py", "_utils\\fetch.py"))
            and "idx" in tb.tb_frame.f_locals
        ):
            index = tb.tb_frame.f_locals["idx"]
        tb = tb.tb_next
    return index


def loss_from(out: Any, batch_idx: int) -> Tensor:
    if isinstance(out, Mapping):
        if out.get("loss") is None:  # Lightning refuses {"loss": None} as it does a missing key
            raise MisconfigurationError(
                f"training_step returned a dict without a 'loss' key (keys: {sorted(out)}) at batch {batch_idx}; "
                'return the loss tensor or {"loss": loss, ...}.'
            )
        return out["loss"]
    raise MisconfigurationError(
        f"training_step returned {type(out).__name__} at batch {batch_idx}; return a scalar loss tensor or a dict with 'loss'."
    )


def skipped_batch(ctx: FitContext, epoch: int, batch_idx: int, first: bool) -> None:
    """`training_step` returned None (automatic optimization). As in Lightning, the batch adds no
    gradient and its window still ends in an optimizer step: a parameter without a gradient is left
    as it is, while `global_step` and step-interval schedulers advance; the window's first batch
    zeroes the gradients (its hooks run) all the same, so a backward the step ran itself is dropped.
    Warned once a process, with Lightning's words first (a filter for them silences it too). Refused
    where that cannot hold: on several processes (Lightning's RuntimeError: the other ranks would
    wait for the missing gradients), and under fp16, whose loss scaler has no gradients to check."""
    world = ctx.parts.strategy.world_size
    if world > 1:
        raise SurgeRuntimeError(
            f"training_step returned None at batch {batch_idx}, which skips its backward, but on {world} "
            "processes a rank that skips its backward leaves the others waiting for its gradients. "
            f"{_INSTEAD}"
        )
    if getattr(ctx.parts.precision, "scaler", None) is not None:
        raise MisconfigurationError(
            f"training_step returned None at batch {batch_idx}, which skips its backward, but with "
            f"precision='16-mixed' the loss scaler needs the gradients of every step. {_INSTEAD}"
        )
    ctx.end.lossless()
    global _warned_none
    if not _warned_none:
        _warned_none = True
        warn(
            "`training_step` returned `None`. If this was on purpose, ignore this warning... (surge: that "
            "batch adds no gradient; the optimizer still steps at the end of its accumulation window, "
            "global_step and step-interval schedulers advance, as in Lightning.)"
        )
    if first:
        ctx.optim.zero_grad_window(epoch, batch_idx)


_INSTEAD = (
    "Return a loss on every batch (e.g. loss * 0 to let a batch count for nothing), or use manual "
    "optimization (self.automatic_optimization = False) to skip steps yourself."
)
_warned_none = False  # once a process, as Lightning's warning cache


def check_loss(loss: Any) -> None:
    if not isinstance(loss, Tensor):
        raise MisconfigurationError(
            f"training_step's loss is a {type(loss).__name__}; it must be a scalar torch.Tensor."
        )
    if loss.is_complex():
        raise MisconfigurationError(
            f"training_step returned a complex loss ({loss.dtype}); return a real scalar, e.g. loss.abs() or loss.real."
        )
    if loss.numel() != 1:
        raise MisconfigurationError(
            f"training_step returned a loss of shape {tuple(loss.shape)}; it must be a scalar. Reduce it, e.g. loss.mean()."
        )
    if not loss.requires_grad:
        raise SurgeRuntimeError(
            "training_step's loss does not require grad: it was detached, computed under torch.no_grad(), "
            "or the module has no trainable parameters in the graph."
        )


def detach_outputs(out: Any, loss: Tensor | None = None, copy: bool = True) -> Any:
    """`training_step`'s output as `on_train_batch_end` gets it, detached; as in Lightning, a
    returned loss tensor comes as `{"loss": loss}` and None as `{}`. With `copy` (automatic
    optimization, as Lightning's `detach().clone()`) the loss is a copy: a hook that changes it in
    place changes neither a logged value nor what the non-finite watch kept. `loss` replaces the
    returned loss (the Lightning mode: divided by the accumulation window, as Lightning's outputs are)."""
    if isinstance(out, Tensor):
        value = (out if loss is None else loss).detach()  # (out itself, or divided)
        return {"loss": value.clone() if copy else value}
    if out is None:
        return {}
    if isinstance(out, Mapping):
        detached = {k: v.detach() if isinstance(v, Tensor) else v for k, v in out.items()}
        kept = out.get("loss") if loss is None or loss is out.get("loss") else loss  # (own API: as returned)
        if isinstance(kept, Tensor):
            detached["loss"] = kept.detach().clone() if copy else kept.detach()
        return detached
    return out
