"""Activation checkpointing: chosen submodules keep no activations for backward and recompute them
there instead (torch's non-reentrant `torch.utils.checkpoint`), trading compute for memory.

A matched module is changed in place: its `forward` becomes a checkpointed call of its own
forward. Nothing is renamed, so state-dict keys, parameter names and `isinstance` checks are
those of the plain model, a checkpoint loads with or without it, and `torch.compile` traces it.
Non-reentrant checkpointing restores the RNG state, so dropout draws the same masks twice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..errors import MisconfigurationError, SurgeTypeError
from ..rank_zero import info

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


class Recompute:
    """The `forward` of a checkpointed module: its own forward, under non-reentrant checkpointing
    when gradients are recorded (evaluation runs it plainly)."""

    def __init__(self, forward: Callable[..., Any]) -> None:
        self.forward = forward

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return self.forward(*args, **kwargs)
        return checkpoint(self.forward, *args, use_reentrant=False, **kwargs)


def is_checkpointed(module: nn.Module) -> bool:
    return isinstance(module.__dict__.get("forward"), Recompute)


def apply(model: nn.Module, policy: Policy | None) -> int:
    """Checkpoint the submodules `policy` matches (the outermost of nested matches); returns how
    many were newly wrapped, reporting it once. A class or policy that matches nothing raises."""
    if policy is None:
        return 0
    matched = _select(model, policy)
    fresh = [module for module in matched if not is_checkpointed(module)]
    for module in fresh:
        module.forward = Recompute(module.forward)
    if fresh:
        kinds = ", ".join(f"{n} {name}" for name, n in Counter(type(m).__name__ for m in fresh).items())
        info(
            f"activation_checkpointing: {len(fresh)} modules recompute their activations in backward ({kinds})"
        )
    return len(fresh)


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
