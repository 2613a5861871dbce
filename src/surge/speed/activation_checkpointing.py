"""Activation checkpointing: chosen submodules keep no activations for backward and recompute them
there instead (torch's non-reentrant checkpointing), trading compute for memory.

Nothing of the user's module is replaced: each matched module gets a forward pre-hook that enters
torch's non-reentrant checkpoint and a forward hook that leaves it (the pair of hooks torch's own
composable `checkpoint` registers), through torch's public hook API, and the hooks are removed
when the stage ends, so the module's `forward`, attributes and hook tables are as before. Nothing
is renamed: state-dict keys, parameter names and `isinstance` checks are those of the plain model,
and a checkpoint loads with or without it. Non-reentrant checkpointing restores the RNG state, so
dropout draws the same masks twice.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import torch
from torch import nn
from torch.utils.checkpoint import _checkpoint_without_reentrant_generator
from torch.utils.hooks import RemovableHandle

from ..callbacks.base import Callback
from ..errors import MisconfigurationError, SurgeRuntimeError, SurgeTypeError
from ..rank_zero import info

if TYPE_CHECKING:
    from ..trainer import Trainer

Policy: TypeAlias = tuple[type[nn.Module], ...] | Callable[[nn.Module], bool]
CheckpointPolicy: TypeAlias = type[nn.Module] | Sequence[type[nn.Module]] | Callable[[nn.Module], bool]
ALLOWED = "None, a list of nn.Module classes, or a callable (module) -> bool"


def check_policy(value: Any) -> Policy | None:
    """`activation_checkpointing=` as given, checked: None, a tuple of classes, or a callable."""
    if value is None:
        return None
    if isinstance(value, type) and issubclass(value, nn.Module):
        return (value,)  # one class: as a list of one
    if isinstance(value, list | tuple):
        bad = [item for item in value if not (isinstance(item, type) and issubclass(item, nn.Module))]
        if bad or not value:
            raise SurgeTypeError(
                f"activation_checkpointing={value!r} is not valid: a list must hold nn.Module subclasses "
                f"(and at least one){f', not {bad!r}' if bad else ''}; allowed: {ALLOWED}."
            )
        return tuple(value)
    if isinstance(value, type) or not callable(value):
        raise SurgeTypeError(f"activation_checkpointing={value!r} is not valid; allowed: {ALLOWED}.")
    return value


class Checkpointed(Callback):
    """The checkpointed modules of one stage: while gradients are recorded, a module's forward runs
    inside torch's non-reentrant checkpoint, entered by its forward pre-hook and left by its forward
    hook; the backward recomputes the forward with the hooks standing aside. A callback of surge's
    own, so the hooks go when the stage ends (`teardown`) or fails (`on_exception`)."""

    def __init__(self, modules: Sequence[nn.Module]) -> None:
        self.modules = list(modules)
        self._running: dict[int, Generator[None, None, None]] = {}  # id(module): its open checkpoint
        self._recomputing = 0  # > 0 inside a backward's recomputation: the hooks stand aside
        self._handles: list[RemovableHandle] = []
        for module in self.modules:
            self._handles.append(module.register_forward_pre_hook(self._enter, with_kwargs=True))
            self._handles.append(module.register_forward_hook(self._leave, prepend=True, always_call=True))

    def _enter(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self._recomputing or not torch.is_grad_enabled():
            return  # evaluation runs plainly; a recomputation runs the forward itself
        gen = _checkpoint_without_reentrant_generator(
            module, True, self._contexts, "default", False, True, *args, **kwargs
        )  # (fn, preserve_rng_state, context_fn, determinism_check, debug, early_stop, inputs)
        self._running[id(module)] = gen
        next(gen)

    def _leave(self, module: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
        gen = self._running.pop(id(module), None) if not self._recomputing else None
        if gen is None:
            return
        with contextlib.suppress(StopIteration):
            next(gen)
            raise SurgeRuntimeError("activation checkpointing: torch's checkpoint did not finish its forward")

    def _contexts(self) -> tuple[contextlib.AbstractContextManager, contextlib.AbstractContextManager]:
        """(around the forward, around its recomputation): the hooks stand aside in the latter."""
        return contextlib.nullcontext(), self._standing_aside()

    @contextlib.contextmanager
    def _standing_aside(self) -> Iterator[None]:
        self._recomputing += 1
        try:
            yield
        finally:
            self._recomputing -= 1

    def remove(self) -> None:
        """Take the hooks off: the modules are as the user built them."""
        for handle in self._handles:
            handle.remove()
        self._handles, self._running = [], {}

    def teardown(self, trainer: Trainer, module: Any, stage: str) -> None:
        self.remove()

    def on_exception(self, trainer: Trainer, module: Any, err: BaseException) -> None:
        self.remove()


def is_checkpointed(module: nn.Module) -> bool:
    """Whether `module` runs checkpointed now (a stage holds its hooks)."""
    hooks = module._forward_pre_hooks.values()  # torch's table of them (read only)
    return any(isinstance(getattr(hook, "__self__", None), Checkpointed) for hook in hooks)


def apply(model: nn.Module, policy: Policy | None) -> list[Checkpointed]:
    """Checkpoint the submodules `policy` matches (the outermost of nested matches) for one stage,
    reporting it; returns the callback that holds the hooks (none without a policy). A class or
    policy that matches nothing raises."""
    if policy is None:
        return []
    fresh = [module for module in _select(model, policy) if not is_checkpointed(module)]
    if not fresh:
        return []
    kinds = ", ".join(f"{n} {name}" for name, n in Counter(type(m).__name__ for m in fresh).items())
    info(f"activation_checkpointing: {len(fresh)} modules recompute their activations in backward ({kinds})")
    return [Checkpointed(fresh)]


def _select(model: nn.Module, policy: Policy) -> list[nn.Module]:
    """The outermost submodules (never the root) the policy matches; unmatched classes raise."""
    matches = _classes_match(model, policy) if isinstance(policy, tuple) else _policy_matches(policy)
    chosen: list[nn.Module] = []
    inside: set[int] = set()  # modules below one already chosen
    for name, module in model.named_modules():
        if not name or id(module) in inside or not matches(module):
            continue
        chosen.append(module)
        inside.update(id(sub) for sub in module.modules())
    if not chosen:
        raise MisconfigurationError(
            f"activation_checkpointing={policy!r} matches no submodule of {type(model).__name__}: nothing "
            "would be checkpointed. Pass the classes of its blocks, a policy that selects some, or None."
        )
    return chosen


def _classes_match(model: nn.Module, classes: Sequence[type[nn.Module]]) -> Callable[[nn.Module], bool]:
    present = [sub for name, sub in model.named_modules() if name]
    missing = [c.__name__ for c in classes if not any(isinstance(sub, c) for sub in present)]
    if missing:
        raise MisconfigurationError(
            f"activation_checkpointing names {missing}, which match no submodule of {type(model).__name__}; "
            "remove them or pass the classes the model is built from."
        )
    return lambda module: isinstance(module, tuple(classes))


def _policy_matches(policy: Callable[[nn.Module], bool]) -> Callable[[nn.Module], bool]:
    def matches(module: nn.Module) -> bool:
        answer = policy(module)
        if not isinstance(answer, bool):
            raise SurgeTypeError(
                f"activation_checkpointing={policy!r} returned {answer!r} for a {type(module).__name__}; "
                "the policy must return True or False."
            )
        return answer

    return matches
