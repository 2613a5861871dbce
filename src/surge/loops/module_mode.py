"""The module's train/eval mode around evaluation and prediction, per submodule: a backbone the
user put in eval mode (frozen BatchNorm) stays in eval mode after validation, as in Lightning."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

if TYPE_CHECKING:
    from .hooks import Hooks


class ModuleMode:
    """Each submodule's `training` flag, captured when built; `restore` sets each one back."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        self.modes = {name: m.training for name, m in module.named_modules()}

    def to_eval(self, hooks: Hooks, hook: str) -> None:
        """Eval mode, through the Module's `hook` (`on_validation_model_eval` & co.) if it overrides it."""
        if hooks.overridden(hook):
            hooks.module(hook)
        else:
            self.module.eval()

    def restore(self, hooks: Hooks | None = None, hook: str | None = None) -> None:
        """Back to the captured modes, or the Module's `hook` (`on_validation_model_train` & co.)
        instead if it overrides it; a submodule added since keeps its own mode."""
        if hooks is not None and hook is not None and hooks.overridden(hook):
            hooks.module(hook)
            return
        for name, m in self.module.named_modules():
            if name in self.modes:
                m.training = self.modes[name]
