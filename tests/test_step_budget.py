"""The hot loop's per-step budget, counted, not timed: what surge executes per training step in the
default configuration (progress bar, TensorBoard and CSV loggers, checkpointing, goodput, the
data-wait pace, metric publishing), with and without `self.log(..., prog_bar=True)` every step.

Two counts over the same window of steady-state steps (after the first step's FLOP count and the
data-wait measurement, inside one epoch, two log intervals included), divided by its length:
- Python calls made by surge's frames or into them (the interpreter's profiling hook: a call whose
  caller or callee is a file under `src/surge`, and each C function a surge frame calls);
- torch ops dispatched (a `TorchDispatchMode` counter), less the hand-written loop's for the same
  model, data and window.
The budgets are the measured figures: one more call (or op) per step fails the test, on any machine;
so does a count that fell by half a call or more, until its budget is lowered to it (a ratchet: slack
left in a budget would let a later addition through)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.data import DataLoader, TensorDataset

import surge

# Per training step, averaged over the window (log intervals included).
# One call more than before the window's backward became a callable of its own (2026-12-07): the
# loop hands the loss and its window to it (`DividedBackward.run`, the division outside accumulation).
# 0.02 more with logging since a log interval's row is written after the batch's end hooks (what they
# log is in it, as in Lightning): one call more per interval of 50 steps.
CALL_BUDGET = {"defaults": 18.68, "logging": 29.38}
OP_BUDGET = {"defaults": 1.24, "logging": 2.34}  # torch ops beyond the hand-written loop's

BATCHES = 240  # one epoch; the count runs from batch FIRST to batch LAST (two log intervals of 50)
FIRST, LAST = 100, 200
SURGE_SRC = str(Path(surge.__file__).parent)


class CallCounter:
    """Counts calls from or into surge's files while installed as the profile function."""

    def __init__(self) -> None:
        self.calls = 0
        self._ours: dict[Any, bool] = {}

    def _is_ours(self, code: Any) -> bool:
        ours = self._ours.get(code)
        if ours is None:
            ours = self._ours[code] = code.co_filename.startswith(SURGE_SRC)
        return ours

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            back = frame.f_back
            if self._is_ours(frame.f_code) or (back is not None and self._is_ours(back.f_code)):
                self.calls += 1
        elif event == "c_call" and self._is_ours(frame.f_code):
            self.calls += 1

    def start(self) -> None:
        sys.setprofile(self)

    def stop(self) -> None:
        sys.setprofile(None)


class OpCounter(TorchDispatchMode):
    """Counts the torch ops dispatched while it is entered."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops += 1
        return func(*args, **(kwargs or {}))

    def start(self) -> None:
        self.__enter__()

    def stop(self) -> None:
        self.__exit__(None, None, None)


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def _loader() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64 * BATCHES, 32, generator=g), torch.randint(0, 10, (64 * BATCHES,), generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True, generator=g)


def _window(counter: Any, batch_idx: int) -> None:
    """Starts the count at batch FIRST's step and stops it at batch LAST's (each at its start)."""
    if batch_idx == FIRST:
        counter.start()
    elif batch_idx == LAST:
        counter.stop()


class Counted(surge.Module):
    def __init__(self, counter: Any, log: bool) -> None:
        super().__init__()
        self.net, self.counter, self.logs = _net(), counter, log

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        _window(self.counter, batch_idx)
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        if self.logs:
            self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _surge_fit(counter: Any, log: bool, root: Path) -> None:
    """The default configuration: only the run directory is chosen."""
    trainer = surge.Trainer(max_epochs=1, default_root_dir=root)
    trainer.fit(Counted(counter, log), _loader())
    assert trainer.global_step == BATCHES


def _hand_written(counter: Any) -> None:
    """The loop an expert writes for the same model and data."""
    net = _net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for batch_idx, (x, y) in enumerate(_loader()):
        _window(counter, batch_idx)
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def _per_step(count: Callable[[], Any], field: str, run: Callable[..., None], *args: Any) -> float:
    counter = count()
    run(counter, *args)
    return getattr(counter, field) / (LAST - FIRST)


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict[str, dict[str, float]]:
    root = tmp_path_factory.mktemp("budget")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # counts do not depend on it; time on a busy machine does, a lot
    try:
        return _measure(root)
    finally:
        torch.set_num_threads(threads)


def _measure(root: Path) -> dict[str, dict[str, float]]:
    raw_ops = _per_step(OpCounter, "ops", _hand_written)
    out: dict[str, dict[str, float]] = {"calls": {}, "ops": {}}
    for name, log in (("defaults", False), ("logging", True)):
        out["calls"][name] = _per_step(CallCounter, "calls", _surge_fit, log, root / name)
        ops = _per_step(OpCounter, "ops", _surge_fit, log, root / f"{name}_ops")
        out["ops"][name] = ops - raw_ops
    return out


@pytest.mark.parametrize("workload", ["defaults", "logging"])
def test_python_calls_per_step_stay_within_the_budget(measured, workload):
    calls = round(measured["calls"][workload], 6)
    assert calls <= CALL_BUDGET[workload], (
        f"{workload}: surge makes {calls:g} Python calls per training step, over its budget of "
        f"{CALL_BUDGET[workload]:g}: something now runs per step (see benchmarks/README.md, 'Per-step budget')"
    )
    assert calls > CALL_BUDGET[workload] - 0.5, (
        f"{workload}: {calls:g} calls per step: lower CALL_BUDGET to it"
    )


@pytest.mark.parametrize("workload", ["defaults", "logging"])
def test_torch_ops_per_step_stay_within_the_budget(measured, workload):
    ops = round(measured["ops"][workload], 6)  # (a difference of two means)
    assert ops <= OP_BUDGET[workload], (
        f"{workload}: surge dispatches {ops:g} torch ops per training step beyond the hand-written "
        f"loop's, over its budget of {OP_BUDGET[workload]:g}"
    )
    assert ops > OP_BUDGET[workload] - 0.5, f"{workload}: {ops:g} extra ops per step: lower OP_BUDGET to it"
