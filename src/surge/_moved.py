"""Import paths of modules that moved into packages, kept working for code written against them.

`import surge.sharded` gives the very module `surge.checkpoint.sharded` is (one object, one state),
imported only when asked for: an old path costs nothing until used.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType

MOVED = {  # the paths the docs gave before surge's modules became packages
    "surge.cache": "surge.data.cached",
    "surge.config_cli": "surge.stage_cli.config",
    "surge.config.cli": "surge.stage_cli.config",
    "surge.cli.config": "surge.stage_cli.config",
    "surge.config.declared": "surge.arguments.declared",
    "surge.config.lightning": "surge.arguments.lightning",
    "surge.config.plugins": "surge.arguments.plugins",
    "surge.plotting": "surge.profiler.plotting",
    "surge.sharded": "surge.checkpoint.sharded",
    "surge.signals": "surge.launch.signals",
    "surge.trainer_properties": "surge.trainer.properties",
    "surge.trainer_stages": "surge.trainer.stages",
    "surge.trainer_launch": "surge.trainer.launching",
    "surge.loops.fit_data.views": "surge.trainer.fit_data_views",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        """The module ran when first imported under its new path."""


def install() -> None:
    if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
        sys.meta_path.append(_Alias())
