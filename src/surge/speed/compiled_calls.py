"""`compile=True` (the forward) and `compile="regions"` (each repeated block): modules whose calls
run compiled during a stage, through a compiled call surge owns.

The user's steps call their modules themselves (`self(x)`, `self.encoder(x)`), so a compiled copy
kept beside the module (`torch.compile(module)`, an `OptimizedModule`) would never be called.
torch's module call looks in one slot for a compiled call, `nn.Module._compiled_call_impl` (what
`nn.Module.compile` fills): surge compiles `nn.Module._call_impl` itself, keeps that compiled
function (one per Trainer and model, so a second fit compiles nothing new), puts it in the slot of
each chosen module when a stage starts and takes it out when the stage ends or fails. Between
stages, and after them, the modules hold nothing of surge's: no attribute, no wrapper around them,
no renamed parameter (state-dict keys carry no `_orig_mod.`).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..callbacks.base import Callback
from ..errors import MisconfigurationError
from ..rank_zero import info
from .compiling import CompileSpec, repeated_blocks

if TYPE_CHECKING:
    from ..trainer import Trainer


def forward_targets(module: nn.Module) -> list[nn.Module]:
    """A module whose steps call `self(...)` has its own call compiled; one without a `forward` of
    its own (its steps call submodules directly) has each direct child's instead."""
    from ..module import Module

    if isinstance(module, Module) and type(module).forward is Module.forward:
        return list(module.children())
    return [module]


def region_targets(module: nn.Module) -> list[nn.Module]:
    """Every block of every repeated container; refuses a model without any."""
    groups = repeated_blocks(module)
    if not groups:
        raise MisconfigurationError(
            f"compile='regions' found no repeated blocks in {type(module).__name__} (an nn.ModuleList or "
            "nn.Sequential of two or more children of one class); use compile=True (the forward) or "
            "compile='step' (the whole training step)."
        )
    listed = ", ".join(f"{len(b)} x {type(b[0]).__name__} in {name}" for name, b in groups)
    count = sum(len(b) for _, b in groups)
    info(f"compile='regions': {count} blocks compiled ({listed}); blocks of one class share their code")
    return [block for _, blocks in groups for block in blocks]


class CompiledCalls(Callback):
    """The modules of one model whose calls run compiled, and the compiled call they share (dynamo
    keys its graphs on each module's guards). A callback of surge's own, handed to each stage:
    `install` fills the modules' slots, `teardown`/`on_exception` empty them. Holds the modules
    weakly, so a Trainer that remembers it keeps no model alive."""

    def __init__(self, targets: list[nn.Module] | None, options: Mapping[str, Any]) -> None:
        # None: the forward's modules, known once the strategy has set the model up (`install`)
        self._targets = None if targets is None else [weakref.ref(t) for t in targets]
        self._call = torch.compile(nn.Module._call_impl, **options)
        self._users: dict[int, Any] = {}  # id(module): a compiled call the user had put there, put back

    @classmethod
    def of(cls, module: nn.Module, spec: CompileSpec) -> CompiledCalls | None:
        """The compiled calls `spec` asks for (scopes "forward" and "regions"); None for others."""
        if spec.scope == "forward":
            return cls(None, spec.options)
        if spec.scope == "regions":
            return cls(region_targets(module), spec.options)
        return None

    def modules(self) -> list[nn.Module]:
        return [t for t in (ref() for ref in self._targets or ()) if t is not None]

    def install(self, forward_modules: list[nn.Module]) -> CompiledCalls:
        """For this stage: each module's call runs compiled (torch's slot for it, on the module).
        `forward_modules`: what runs the model's forward under its strategy (the model itself, or
        a pipeline's stages on this rank), whose calls scope "forward" compiles; chosen once."""
        if self._targets is None:
            self._targets = [weakref.ref(t) for root in forward_modules for t in forward_targets(root)]
        for target in self.modules():
            if "_compiled_call_impl" in vars(target):
                self._users[id(target)] = vars(target)["_compiled_call_impl"]
            target._compiled_call_impl = functools.partial(self._call, target)
        return self

    def remove(self) -> None:
        """The modules as the user built them: the slot back to nn.Module's (no instance entry), or
        to what the user had put there."""
        for target in self.modules():
            vars(target).pop("_compiled_call_impl", None)
            if id(target) in self._users:
                vars(target)["_compiled_call_impl"] = self._users.pop(id(target))

    def teardown(self, trainer: Trainer, module: Any, stage: str) -> None:
        self.remove()

    def on_exception(self, trainer: Trainer, module: Any, err: BaseException) -> None:
        self.remove()
