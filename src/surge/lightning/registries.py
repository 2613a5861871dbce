"""Lightning's `StrategyRegistry` and `AcceleratorRegistry` over surge's names: dicts of name -> entry
(`description`, `init_params`, the class) that a library can `register` into at import time, ask with
`in` and list. They hold what surge builds: `Trainer(strategy=...)` still reads surge's own registry, and
a registered class is built only by `get(name)`, where one surge cannot build (a stand-in, a refused
strategy) is refused by name."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..errors import MisconfigurationError


class LightningRegistry(dict):
    """Name -> `{"description", "init_params", <what>, <what>_name}`, as Lightning's registries."""

    def __init__(self, what: str, entries: dict[str, type]) -> None:
        super().__init__()
        self.what = what
        for name, cls in entries.items():
            self.register(name, cls, description=f"surge's {cls.__name__}")

    def register(
        self,
        name: str,
        cls: Callable | None = None,
        description: str = "",
        override: bool = False,
        **init_params: Any,
    ) -> Callable:
        """Register `cls` (or, without it, the decorated class) under `name` with its constructor's
        `init_params`; a name registered already needs `override=True`."""
        if not isinstance(name, str):
            raise TypeError(f"`name` must be a str, found {name}")
        if name in self and not override:
            raise MisconfigurationError(
                f"'{name}' is already present in the registry. HINT: Use `override=True`."
            )

        def add(target: Callable) -> Callable:
            self[name] = {
                "description": description or "",
                "init_params": init_params,
                self.what: target,
                f"{self.what}_name": name,
            }
            return target

        return add if cls is None else add(cls)

    def get(self, name: str, default: Any = None) -> Any:
        """The object registered under `name`, built with its `init_params`; `default`, else a KeyError."""
        if name in self:
            entry = self[name]
            return entry[self.what](**entry["init_params"])
        if default is not None:
            return default
        raise KeyError(
            f"'{name}' not found in registry. Available names: {', '.join(sorted(self)) or 'none'}"
        )

    def remove(self, name: str) -> None:
        """Forget `name`."""
        self.pop(name)

    def __str__(self) -> str:
        return f"Registered {self.what.capitalize()}s: {', '.join(self)}"


class StrategyRegistry(LightningRegistry):
    """Lightning's strategy names; a name registered here is also one `Trainer(strategy=name)` takes:
    the Trainer builds the class with its `init_params`, as Lightning's does."""

    def register(
        self,
        name: str,
        cls: Callable | None = None,
        description: str = "",
        override: bool = False,
        **init_params: Any,
    ) -> Callable:
        def add(target: Callable) -> Callable:
            super(StrategyRegistry, self).register(name, target, description, override, **init_params)
            _trainer_name(name, target, init_params)
            return target

        return add if cls is None else add(cls)

    def remove(self, name: str) -> None:
        super().remove(name)
        from ..config.registry import STRATEGIES

        if STRATEGIES.name_of(name) == name and getattr(STRATEGIES.get(name), "lightning_registered", False):
            STRATEGIES.remove(name)

    def available_strategies(self) -> list[str]:
        """The registered names."""
        return list(self)


def _trainer_name(name: str, target: Callable, init_params: dict[str, Any]) -> None:
    """Make `name` (not one of surge's own) a `Trainer(strategy=...)` value that builds `target(**init_params)`."""
    from ..config.registry import STRATEGIES
    from ..strategies.base import Strategy

    known = STRATEGIES.name_of(name)
    if known is not None and not getattr(STRATEGIES.get(known), "lightning_registered", False):
        return  # surge's own name (the registry lists surge's strategies under their names)

    class Registered:
        lightning_registered = True

        @classmethod
        def from_layout(cls, layout: Any) -> Strategy:
            strategy = target(**init_params)
            if not isinstance(strategy, Strategy):
                raise MisconfigurationError(
                    f"Trainer(strategy={name!r}): StrategyRegistry built {type(strategy).__name__}, which is "
                    "not a strategy surge runs; register a subclass of a lightning.pytorch.strategies class."
                )
            strategy.check_layout(layout)
            return strategy

    if known is not None:
        STRATEGIES.remove(known)
    STRATEGIES.add(name, Registered)


class AcceleratorRegistry(LightningRegistry):
    def available_accelerators(self) -> set[str]:
        """The registered names."""
        return set(self)


@functools.cache
def strategies(deepspeed: type) -> StrategyRegistry:
    """A registry of the strategy names surge's Trainer takes, with surge's classes, and Lightning's
    DeepSpeed names with `deepspeed` (the stand-in that refuses when built; lightning/strategies.py's)."""
    from ..config.registry import STRATEGIES

    names = (*STRATEGIES.names, *STRATEGIES.aliases)
    registry = StrategyRegistry(
        "strategy", {key: STRATEGIES.get(STRATEGIES.name_of(key) or key) for key in names}
    )
    for name, params in DEEPSPEED.items():  # Lightning's names, refused when get() builds them (the Trainer
        # refuses the name itself, as before the registry was asked for)
        LightningRegistry.register(registry, name, deepspeed, description=f"Lightning's {name}", **params)
    return registry


# Lightning's DeepSpeed names and their arguments (surge refuses DeepSpeedStrategy when it is built).
DEEPSPEED: dict[str, dict[str, Any]] = {
    "deepspeed": {}, "deepspeed_stage_1": {"stage": 1}, "deepspeed_stage_2": {"stage": 2},
    "deepspeed_stage_2_offload": {"stage": 2, "offload_optimizer": True}, "deepspeed_stage_3": {"stage": 3},
    "deepspeed_stage_3_offload": {"stage": 3, "offload_parameters": True, "offload_optimizer": True},
}  # fmt: skip


@functools.cache
def accelerators() -> AcceleratorRegistry:
    """A registry of surge's accelerators: cpu, cuda, mps."""
    from ..accelerators import CPUAccelerator, CUDAAccelerator, MPSAccelerator

    return AcceleratorRegistry(
        "accelerator", {"cpu": CPUAccelerator, "cuda": CUDAAccelerator, "mps": MPSAccelerator}
    )
