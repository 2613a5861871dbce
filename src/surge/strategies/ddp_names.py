"""Lightning's names for DDP with a start method and `find_unused_parameters` preset:
`strategy="ddp_spawn"`, `"ddp_fork"`, `"ddp_notebook"` (a fork: what works in a notebook) and their
`_find_unused_parameters_true` / `_false` forms. Each name is a small subclass of `DDPStrategy`
defined at this module's top level, so an object of it pickles for the ranks spawn starts."""

from __future__ import annotations

from typing import Any, ClassVar

from ..config.registry import register_strategy
from .ddp import DDPStrategy


class PresetDDPStrategy(DDPStrategy):
    """`DDPStrategy` with some arguments preset by its registered name (given ones win)."""

    preset: ClassVar[dict[str, Any]] = {}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{**self.preset, **kwargs})


_START = {"ddp": "popen", "ddp_spawn": "spawn", "ddp_fork": "fork", "ddp_notebook": "fork"}
NAMES: dict[str, dict[str, Any]] = {
    **{name: {"start_method": start} for name, start in _START.items() if name != "ddp"},
    **{
        f"{name}_find_unused_parameters_{str(found).lower()}": {
            "start_method": start,
            "find_unused_parameters": found,
        }
        for name, start in _START.items()
        for found in (False, True)
        if (name, found) != ("ddp", True)  # "ddp_find_unused_parameters_true" is ddp.py's
    },
}


def _class_name(name: str) -> str:
    return "DDP_" + "".join(part.title() for part in name.split("_")[1:]) + "Strategy"


for _name, _preset in NAMES.items():
    _cls = type(_class_name(_name), (PresetDDPStrategy,), {"preset": _preset, "__module__": __name__})
    globals()[_cls.__name__] = register_strategy(_name)(_cls)
