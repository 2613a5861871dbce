"""`Trainer(compile=...)`: what is compiled (the forward, the whole training step, or each repeated
block), and a watch on recompilations and compile time.

`compile=True` or `{"scope": "forward", **opts}` compiles the module's call for each stage
(compiled_calls.py).
`"step"` compiles the training step through the strategy's wrapper (forward and loss; the backward
follows through AOTAutograd) and each optimizer's step (a callable surge owns: the optimizer itself
is left as it was); under manual optimization the module's
`training_step` runs the backwards and steps itself, so it is compiled as written, split at each
of them (said once, with a warning). `"regions"` compiles every block of a
container of identical blocks (an `nn.ModuleList`/`nn.Sequential`), once per block class
(compiled_calls.py).
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.optim import Optimizer

from ..callbacks.base import Callback
from ..errors import bad_value
from ..optim.tensor_lr import refuse_foreach_with_tensor_lr
from ..rank_zero import info, warn

if TYPE_CHECKING:
    from ..trainer import Trainer

SCOPES = ("forward", "step", "regions")
RECOMPILES_PER_EPOCH = 2  # after the first epoch, more new graphs than this in one epoch are warned about
_ALLOWED = (
    "True, False, one of 'forward', 'step', 'regions', or a dict {'scope': ..., **torch.compile options}"
)


@dataclass(frozen=True)
class CompileSpec:
    """What `compile=` asks for: a scope and the torch.compile options."""

    scope: str
    options: dict[str, Any] = field(default_factory=dict)


def compile_spec(value: Any) -> CompileSpec | None:
    """The validated `compile=` argument; None when nothing is compiled. Called once, by the
    config's validation: every part reads the spec it made (`TrainerConfig.compile`)."""
    if value is False:
        return None
    if value is True:
        return CompileSpec("forward")
    if isinstance(value, str):
        if value not in SCOPES:
            raise bad_value("compile", value, f"one of {SCOPES}, True, False or a dict")
        return CompileSpec(value)
    if not isinstance(value, dict):
        raise bad_value("compile", value, _ALLOWED)
    options = dict(value)
    scope = options.pop("scope", "forward")
    if scope not in SCOPES:
        raise bad_value("compile", value, f'"scope" one of {SCOPES} (got {scope!r})')
    known = set(inspect.signature(torch.compile).parameters) - {"model"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise bad_value(
            "compile", value, f"'scope' and torch.compile options among {sorted(known)} ({unknown} unknown)"
        )
    return CompileSpec(scope, options)


# -- regions ---------------------------------------------------------------------------------------
def repeated_blocks(module: nn.Module) -> list[tuple[str, list[nn.Module]]]:
    """(container name, its blocks) for every ModuleList/Sequential of >= 2 children of one class,
    outermost first (a repeated block's insides are not searched again)."""
    found: list[tuple[str, list[nn.Module]]] = []

    def visit(name: str, m: nn.Module) -> None:
        children = list(m.children())
        repeated = len(children) >= 2 and len({type(c) for c in children}) == 1
        if repeated and isinstance(m, nn.ModuleList | nn.Sequential):
            found.append((name or type(m).__name__, children))
            return
        for child_name, child in m.named_children():
            visit(f"{name}.{child_name}" if name else child_name, child)

    visit("", module)
    return found


# -- the training step -----------------------------------------------------------------------------
def compiled_training_step(
    spec: CompileSpec | None, strategy: Any, module: nn.Module
) -> Callable[..., Any] | None:
    """The strategy's training-step callable (after it wrapped the module: DDP, FSDP) compiled when
    `compile=` asks for scope "step"; None otherwise."""
    if spec is None or spec.scope != "step":
        return None
    if not getattr(module, "automatic_optimization", True):
        warn(MANUAL_STEP_WARNING)
    return torch.compile(strategy.step_fn(module, "training_step"), **spec.options)


MANUAL_STEP_WARNING = (
    "compile='step' with manual optimization (automatic_optimization=False) compiles your "
    "training_step as written and each optimizer's step() on its own: torch.compile splits "
    "training_step into separate graphs at every manual_backward, zero_grad and optimizer.step "
    "call, so its backward is not traced with its forward as under automatic optimization. "
    "Return the loss from training_step (automatic optimization) for one forward+backward graph, or "
    "use compile=True to compile the module's forward only."
)


class CompiledStep:
    """One optimizer's step compiled (torch's compiled-optimizer recipe), as a callable surge owns:
    the user's `opt.step` stays the class's and nothing is stamped on the optimizer, so a scheduler
    created before or after sees the optimizer as the user built it.

    With `tensor_lr` (a scheduler changes the rates), each group's float lr is lent to the compiled
    step as a 0-d tensor filled from it, so a new rate does not recompile, and the float is put
    back right after the step: hooks, callbacks and checkpoints see the user's floats."""

    def __init__(self, optimizer: Optimizer, options: Mapping[str, Any], tensor_lr: bool) -> None:
        self.optimizer, self.tensor_lr = optimizer, tensor_lr
        self._rates: dict[int, tuple[torch.Tensor, float]] = {}  # group index: (lent tensor, its value)
        self._compiled = torch.compile(self._eager, **options)

    def _eager(self) -> Any:
        return self.optimizer.step()

    def __call__(self) -> Any:
        if not self.tensor_lr:
            return self._compiled()
        lent = self._lend_rates()
        try:
            return self._compiled()
        finally:
            for group, lr in lent:
                group["lr"] = lr

    def _lend_rates(self) -> list[tuple[dict[str, Any], float]]:
        """Each float lr swapped for its tensor (filled only when the rate changed: no per-step work
        on the device otherwise); returns (group, the user's float) to put back."""
        lent = []
        for i, group in enumerate(self.optimizer.param_groups):
            lr = group["lr"]
            if isinstance(lr, torch.Tensor):
                continue  # the user's own tensor: used as it is
            rate = self._rates.get(i)
            if rate is None:
                rate = self._rates[i] = (torch.tensor(float(lr)), lr)
            elif rate[1] != lr:
                rate[0].fill_(lr)
                self._rates[i] = (rate[0], lr)
            group["lr"] = rate[0]
            lent.append((group, lr))
        return lent


def compile_optimizers(
    spec: CompileSpec | None, optimizers: list[Optimizer], scheduled: bool
) -> list[CompiledStep] | None:
    """Scope "step": each optimizer's step compiled, one `CompiledStep` per optimizer (in order),
    which the precision calls instead of `opt.step`; None for other scopes. With schedulers the
    rates are lent as 0-d tensors (see `CompiledStep`)."""
    if spec is None or spec.scope != "step":
        return None
    if scheduled:
        refuse_foreach_with_tensor_lr(optimizers)
    return [CompiledStep(opt, spec.options, tensor_lr=scheduled) for opt in optimizers]


# -- recompilations and compile time ---------------------------------------------------------------
class CompileWatch(Callback):
    """Counts the graphs torch._dynamo compiles during a fit; says the compile time once (after the
    first epoch) and warns once, with dynamo's last guard-failure reason, when an epoch after the
    first still compiles more than `RECOMPILES_PER_EPOCH` new graphs. Read at epoch ends only."""

    def __init__(self, scope: str) -> None:
        self.scope = scope
        self.seconds = 0.0
        self._epoch_start_graphs = self._fit_start_graphs = 0
        self._failures: dict[Any, int] = {}
        self._started: float | None = None
        self._epochs = 0
        self.warned = False
        self._unwatch: Callable[[], None] = _nothing

    def _start(self, *_: Any) -> None:
        self._started = time.perf_counter()

    def _end(self, *_: Any) -> None:
        if self._started is not None:
            self.seconds += time.perf_counter() - self._started
            self._started = None

    def on_fit_start(self, trainer: Trainer, module: Any) -> None:
        self._unwatch = compile_events(self._start, self._end, import_dynamo=True)
        self._epoch_start_graphs = self._fit_start_graphs = graphs_compiled()
        self._failures = guard_failure_counts()

    def on_train_epoch_end(self, trainer: Trainer, module: Any) -> None:
        self._epochs += 1
        now = graphs_compiled()
        new, self._epoch_start_graphs = now - self._epoch_start_graphs, now
        before, self._failures = self._failures, guard_failure_counts()
        if self._epochs == 1:
            graphs = now - self._fit_start_graphs
            info(f"compile={self.scope!r}: {graphs} graphs compiled in {self.seconds:.1f} s (first epoch)")
        elif new > RECOMPILES_PER_EPOCH and not self.warned:
            self.warned = True
            warn(
                f"compile={self.scope!r}: {new} graphs were recompiled in epoch {trainer.current_epoch}, after "
                f"the first; the latest reason: {recompile_reason(before)}. Recompiling costs more than it "
                "saves: keep shapes stable (drop_last=True, padding), pass dynamic=True in compile={...}, "
                "or compile=False."
            )

    def on_fit_end(self, trainer: Trainer, module: Any) -> None:
        self._remove()

    def on_exception(self, trainer: Trainer, module: Any, err: BaseException) -> None:
        self._remove()

    def _remove(self) -> None:
        self._unwatch()


def compile_watch(spec: CompileSpec | None, stage: str) -> list[Callback]:
    """The watch for a fit that compiles (`spec`: the parsed `compile=`); none otherwise."""
    return [CompileWatch(spec.scope)] if spec is not None and stage == "fit" else []


def compile_events(
    start: Callable[..., Any], end: Callable[..., Any], import_dynamo: bool
) -> Callable[[], None]:
    """Has torch call `start`/`end` around each compilation from now on; returns what stops it.
    Without `import_dynamo`, nothing when dynamo is not imported yet (importing it costs a second
    for runs that never compile); nothing on an older torch without the callbacks."""
    if not import_dynamo and "torch._dynamo" not in sys.modules:
        return _nothing
    try:
        from torch._dynamo.callback import callback_handler
    except ImportError:
        return _nothing
    callback_handler.register_start_callback(start)
    callback_handler.register_end_callback(end)

    def stop() -> None:
        for remove, fn in (
            (callback_handler.remove_start_callback, start),
            (callback_handler.remove_end_callback, end),
        ):
            with contextlib.suppress(ValueError):  # removed already
                remove(fn)

    return stop


def _nothing() -> None:
    pass


def graphs_compiled() -> int:
    """Frames dynamo has compiled in this process (torch._dynamo.utils.counters, torch 2.0 on)."""
    from torch._dynamo.utils import counters

    return int(counters["frames"]["ok"])


def guard_failure_counts() -> dict[Any, int]:
    """How many guard failures (recompilations) dynamo has recorded per code object so far."""
    from torch._dynamo.utils import guard_failures

    return {code: len(failures) for code, failures in guard_failures.items()}


def recompile_reason(before: Mapping[Any, int]) -> str:
    """The latest guard failure recorded since `before` (a `guard_failure_counts()`) for the code
    that recompiled most since then, or 'unknown'."""
    from torch._dynamo.utils import guard_failures

    new = {code: failures[before.get(code, 0) :] for code, failures in guard_failures.items()}
    new = {code: failures for code, failures in new.items() if failures}
    if not new:
        return "unknown"
    code = max(new, key=lambda c: len(new[c]))
    return f"{getattr(code, 'co_name', code)}: {new[code][-1]}"
