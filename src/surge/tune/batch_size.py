"""The largest batch that fits: doubling, then a binary search between the last fit and the first miss."""

from __future__ import annotations

import contextlib
import gc
import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader

from ..errors import SurgeRuntimeError, bad_value
from ..module import Module
from ..rank_zero import info
from .loaders import loader_batch_size, with_batch_size
from .memory import available_ram, measure_peak, tensor_bytes
from .trial import TrialSteps, TrialTarget, preserved, train_loader, trial_target

if TYPE_CHECKING:
    from ..trainer import Trainer


def find_batch_size(
    model: Module,
    train_dataloaders: DataLoader | None = None,
    *,
    trainer: Trainer | None = None,
    max_memory: int | None = None,
    init: int = 2,
    max_trials: int = 25,
    max_batch_size: int | None = 8192,
    steps: int = 3,
    verbose: bool = True,
) -> int:
    """The largest batch size at which `steps` real training steps fit in memory.

    Each trial re-creates the loader with the new batch size (single-process loading, sequential
    order) and runs forward, backward and the optimizer step with the trainer's device and
    precision. A trial fails on an out-of-memory error (CUDA's, or the CPU allocator's), after
    which memory is freed (gc, `torch.cuda.empty_cache()`) and the search goes on; or when the
    memory it used exceeds `max_memory` bytes: the module's parameters, buffers and gradients plus
    the peak the steps allocated (activations, gradients, optimizer state, the batch). Without
    `max_memory`, CUDA runs until out of memory and the CPU uses half of the RAM available now.
    The batch never exceeds the dataset's length or `max_batch_size` (None: no cap; 8192 as
    `BatchSizeFinder(max_val)`: one default for each argument, whichever door). The model's parameters,
    buffers, gradients, modes, the precision state and every RNG are restored afterwards.
    """
    _check_args(init, max_trials, max_memory, max_batch_size, steps)
    target = trial_target(trainer)
    loader = train_loader(model, train_dataloaders, "find_batch_size")
    loader_batch_size(loader)
    device = target.device
    if max_memory is None and device.type != "cuda":
        max_memory = available_ram() // 2
    cap = _cap(loader, max_batch_size)
    fits = lambda b: trial_fits(model, target, loader, b, steps, max_memory)  # noqa: E731
    best = search(fits, min(init, cap), cap, max_trials)
    if best == 0:
        raise SurgeRuntimeError(
            f"find_batch_size: not even a batch of 1 fits (max_memory={max_memory}); the model and its "
            "optimizer state alone need more memory than there is."
        )
    if verbose:
        info(
            f"find_batch_size: the largest batch that fits is {best}" + (" (the cap)" if best == cap else "")
        )
    return best


def search(fits: Any, init: int, cap: int, max_trials: int) -> int:
    """The largest b in [1, cap] with fits(b), assuming fits is monotone; 0 if none does.

    Doubles from `init` until a miss (or `cap`), then halves the interval between the largest fit
    and the smallest miss. At most `max_trials` calls of `fits`.
    """
    good, bad, b = 0, cap + 1, init
    for _ in range(max_trials):
        if fits(b):
            good = b
            b = min(2 * b, cap) if bad == cap + 1 else (good + bad) // 2
        else:
            bad = b
            b = (good + bad) // 2
        if bad - good <= 1 or b == good:
            break
    return good


def trial_fits(
    model: Module,
    target: TrialTarget,
    loader: DataLoader,
    batch_size: int,
    steps: int,
    budget: int | None,
    step: str = "training_step",
) -> bool:
    """Whether `steps` steps (training steps, or the evaluation `step` named) on `loader` re-created
    with `batch_size` fit (no out-of-memory error, and within `budget` bytes when given); the model
    is restored afterwards, and what the trial left is collected before the next."""
    with _only_new_objects_collected():
        ok = _trial(model, target, loader, batch_size, steps, budget, step)
        _free()
    return ok


def _trial(
    model: Module, target: TrialTarget, loader: DataLoader, batch_size: int, steps: int, budget: int | None,
    step: str,
) -> bool:  # fmt: skip
    trial = with_batch_size(loader, batch_size, sampler=None, num_workers=0, shuffle=False)
    train = step == "training_step"
    try:
        with preserved(model, target.precision), TrialSteps(model, target, optimize=train) as runner:
            base = tensor_bytes(model)

            def work() -> None:
                for i, batch in enumerate(itertools.islice(trial, steps)):
                    if train:
                        runner.step(batch, i)
                    else:
                        runner.evaluate(batch, i, step)

            peak = base + measure_peak(work, runner.device)
            ok = budget is None or peak <= budget
    except Exception as err:  # only out-of-memory errors mean "does not fit"
        if not _is_oom(err):
            raise
        ok = False
    return ok


@contextlib.contextmanager
def _only_new_objects_collected() -> Iterator[None]:
    """The objects that existed before the trial set aside from the garbage collector (`gc.freeze`)
    while it runs, so the collection after it walks only what the trial made, not every object that
    importing torch made. Left alone when the process froze objects itself (unfreezing would undo
    that)."""
    frozen = gc.isenabled() and gc.get_freeze_count() == 0
    if frozen:
        gc.freeze()
    try:
        yield
    finally:
        if frozen:
            gc.unfreeze()


def _is_oom(err: BaseException) -> bool:
    if isinstance(err, torch.OutOfMemoryError):
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def _free() -> None:
    gc.collect()  # the failed trial's tensors, held by reference cycles through its traceback
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _cap(loader: DataLoader, max_batch_size: int | None) -> int:
    cap = max_batch_size if max_batch_size is not None else 2**31
    with contextlib.suppress(TypeError):  # an IterableDataset without a length
        cap = min(cap, len(loader.dataset))  # type: ignore[arg-type]
    return max(cap, 1)


def _check_args(init: Any, max_trials: Any, max_memory: Any, max_batch_size: Any, steps: Any) -> None:
    def positive(name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise bad_value(name, value, "an int >= 1")

    positive("init", init)
    positive("max_trials", max_trials)
    positive("steps", steps)
    if max_batch_size is not None:
        positive("max_batch_size", max_batch_size)
    if max_memory is not None:
        positive("max_memory", max_memory)
