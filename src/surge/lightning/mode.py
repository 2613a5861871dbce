"""The no-edit Lightning mode: `surge run train.py [args]` or `python -m surge.lightning train.py [args]`.

A `sys.meta_path` finder, installed only in this mode, maps `lightning`, `lightning.pytorch` and
`pytorch_lightning` (and the submodules this namespace covers) to `surge.lightning`, then the
script runs as `__main__`. Outside the mode nothing is installed: `import surge as L` works as is.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from types import FrameType, ModuleType

from ..errors import MisconfigurationError
from ..rank_zero import global_rank
from . import names, standins

ROOTS = ("lightning.pytorch", "pytorch_lightning", "lightning_fabric", "lightning")  # longest first
TARGET = "surge.lightning"
SCRIPT_VARIABLE = "SURGE_LIGHTNING_SCRIPT"  # the script's path, for processes multiprocessing spawns
FABRIC_UTILITIES = (
    "",
    ".seed",
    ".rank_zero",
    ".apply_func",
    ".cloud_io",
    ".types",
    ".distributed",
    ".data",
    ".throughput",
    ".warnings",
)  # lightning.fabric.utilities and these submodules
# Lightning's module (relative to lightning.pytorch) -> this namespace's (relative to TARGET).
MODULES = {
    "": "", "trainer": "", "trainer.trainer": "", "seed": "seeding",
    "callbacks": "callbacks", "loggers": "loggers", "cli": "cli", "demos": "demos",
    "demos.boring_classes": "demos.boring_classes", "demos.transformer": "demos.transformer",
    "core": "core", "core.module": "core.module", "core.datamodule": "core.datamodule",
    "core.optimizer": "core.optimizer", "utilities": "utilities", "utilities.rank_zero": "utilities.rank_zero",
    "utilities.imports": "utilities.imports", "utilities.types": "utilities.types",
    "utilities.seed": "seeding", "utilities.exceptions": "utilities.exceptions",
    "utilities.warnings": "utilities.warnings", "utilities.model_helpers": "utilities.model_helpers",
    "utilities.enums": "utilities.enums",
    "utilities.data": "utilities.data", "utilities.parameter_tying": "utilities.parameter_tying",
    "utilities.memory": "utilities.memory", "utilities.parsing": "utilities.parsing",
    "core.hooks": "core.hooks", "core.saving": "core.saving", "core.mixins": "core.mixins",
    "core.mixins.hparams_mixin": "core.mixins",
    "trainer.states": "states", "tuner": "tuner", "tuner.tuning": "tuner",
    "plugins": "plugins", "plugins.environments": "plugins.environments", "plugins.io": "plugins.io",
    "plugins.precision": "plugins.precision", "plugins.layer_sync": "plugins.layer_sync",
    **{f"plugins.io.{m}": "plugins.io" for m in ("async_plugin", "checkpoint_plugin", "torch_plugin", "wrapper")},
    **{f"plugins.precision.{m}": "plugins.precision" for m in (
        "amp", "double", "half", "fsdp", "precision", "bitsandbytes", "deepspeed", "transformer_engine", "xla")},
    "fabric.plugins": "plugins", "fabric.plugins.environments": "plugins.environments",
    "fabric.plugins.io": "plugins.io", "fabric.plugins.io.checkpoint_io": "plugins.io",
    "fabric.plugins.io.torch_io": "plugins.io",
    "utilities.combined_loader": "utilities.combined_loader",
    "strategies": "strategies", "strategies.ddp": "strategies", "strategies.fsdp": "strategies",
    "strategies.single_device": "strategies", "strategies.strategy": "strategies",
    "strategies.parallel": "strategies", "strategies.model_parallel": "strategies",
    "strategies.deepspeed": "strategies", "strategies.xla": "strategies", "strategies.single_xla": "strategies",
    "accelerators": "accelerators", "accelerators.accelerator": "accelerators", "accelerators.cpu": "accelerators",
    "accelerators.cuda": "accelerators", "accelerators.mps": "accelerators", "accelerators.xla": "accelerators",
    "fabric": "fabric", "fabric.utilities.exceptions": "utilities.exceptions",
    "utilities.grads": "utilities", "utilities.model_summary": "utilities.model_summary",
    "utilities.model_summary.model_summary": "utilities.model_summary",
    **{f"fabric.utilities{sub}": f"fabric_utilities{sub}" for sub in FABRIC_UTILITIES},
    "fabric.utilities.imports": "utilities.imports", "fabric.utilities.enums": "fabric_utilities",
    "utilities.signature_utils": "utilities.signature_utils", "fabric.accelerators.cuda": "fabric_accelerators",
    **{f"fabric.plugins.io{m}": "plugins.io" for m in ("", ".checkpoint_io", ".torch_io")},
    **{f"fabric.plugins.precision{m}": "plugins.precision" for m in (
        "", ".amp", ".double", ".half", ".fsdp", ".precision", ".bitsandbytes", ".deepspeed",
        ".transformer_engine", ".xla")},
}  # fmt: skip
WHOLE = ("callbacks", "loggers", "profilers")  # `callbacks.early_stopping` and the like: the whole module
DIFFERENCES = (
    "surge runs {script} in Lightning mode: `lightning`, `lightning.pytorch` and `pytorch_lightning` "
    "are surge's compatibility layer. Deliberate differences: checkpoints are loaded weights-only "
    "(tensors and plain containers, digest verified), a sequential sampler stays sequential on many "
    "processes, and the progress bar refreshes on a timer; see docs/lightning.md."
)


def surge_name(fullname: str) -> str | None:
    """The surge module behind a Lightning module name; None when `fullname` is not Lightning's or
    surge has no module for it (then `lightning_submodule` gives a stand-in, if Lightning has it)."""
    for root in ROOTS:
        if fullname == root or fullname.startswith(root + "."):
            rel = fullname[len(root) + 1 :]
            if root == "lightning_fabric":  # the standalone package is lightning.fabric
                root, rel = "lightning", "fabric" + (f".{rel}" if rel else "")
            break
    else:
        return None
    head = rel.split(".")[0]
    if head == "fabric" and root != "lightning":
        return None
    mapped = MODULES.get(rel)
    if mapped is None and head in WHOLE and names.is_module(fullname):
        mapped = head
    if mapped is None:
        return None
    return f"{TARGET}.{mapped}" if mapped else TARGET


def is_lightning(fullname: str) -> bool:
    """Whether `fullname` is under one of Lightning's package names."""
    return any(fullname == r or fullname.startswith(r + ".") for r in ROOTS)


@functools.cache
def _behind(target: str) -> tuple[str, ...]:
    """The Lightning modules (their `lightning.` names) that surge's module `target` stands for."""
    return tuple(m for m in names.modules() if surge_name(m) == target)


def lightning_submodule(fullname: str) -> ModuleType:
    """Lightning's module `fullname` in this mode: surge's module where the map has one (with stand-ins
    for Lightning's names it lacks), a stand-in module where Lightning has it and surge has none, else
    Lightning's own `ModuleNotFoundError`."""
    target = surge_name(fullname)
    if target is not None:
        return standins.with_fallback(
            importlib.import_module(target), functools.partial(_behind, target), lightning_submodule
        )
    if is_lightning(fullname) and names.is_module(fullname):
        return standins.standin_module(fullname, lightning_submodule)
    raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)


class _Alias(importlib.abc.Loader):
    """Gives the import system surge's module (or a stand-in) under the Lightning name."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return lightning_submodule(spec.name)

    def exec_module(self, module: ModuleType) -> None:
        """Already executed when surge imported it; a module's `_on_import` (what Lightning's does each time
        it is executed) runs again, so `importlib.reload` of the Lightning name has Lightning's effect."""
        on_import = module.__dict__.get("_on_import")
        if callable(on_import):
            on_import()


def _probing() -> bool:
    """Whether this lookup comes from `importlib.util.find_spec` (directly or while it imports a
    parent package): a probe asking whether a package is installed, not an import."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(PROBE_DEPTH):
        if frame is None:
            return False
        code = frame.f_code
        if code.co_name == "find_spec" and code.co_filename in PROBE_FILES:
            return True
        frame = frame.f_back
    return False


PROBE_FILES = ("<frozen importlib.util>", importlib.util.__file__)
PROBE_DEPTH = 8  # importlib.util.find_spec -> __import__(parent) -> ... -> this finder


class LightningFinder(importlib.abc.MetaPathFinder):
    """Maps Lightning's module names to `surge.lightning` for imports. `relaunch` is the `-m`
    module that starts this mode again; surge's process launcher runs other ranks with it.

    Importable, not installed: an `import` (statement, `importlib.import_module`) of a Lightning
    name gets surge's module, but a probe (`importlib.util.find_spec`, which lightning_utilities'
    `package_available` and `RequirementCache` use) of one not yet imported gets None, and
    `importlib.metadata` has no Lightning distribution, so a library that gates on Lightning
    being installed takes its path for "not installed" instead of importing Lightning internals
    surge does not have. Once imported, `find_spec` answers from `sys.modules`, as for any module,
    and finds the submodules of an imported Lightning package as an import would."""

    relaunch = "surge.lightning"
    lightning_semantics = (
        True  # read by `surge.config.semantics`: Lightning's behaviour where surge's differs
    )

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not is_lightning(fullname):
            return None
        if _probing() and fullname.rpartition(".")[0] not in sys.modules:
            # A probe of a package not imported: "not installed". Under one the script imported it is an
            # import: else the path finder would load surge's files under Lightning's names, a second copy.
            return None
        if surge_name(fullname) is None and not names.is_module(fullname):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)  # as under Lightning
        # A package spec: `lightning.pytorch.callbacks.progress` needs its parent to have a __path__.
        return importlib.util.spec_from_loader(fullname, _Alias(), is_package=True)


def install() -> LightningFinder:
    """Put the finder first on `sys.meta_path` (once); returns it."""
    for finder in sys.meta_path:
        if isinstance(finder, LightningFinder):
            return finder
    finder = LightningFinder()
    sys.meta_path.insert(0, finder)
    return finder


def uninstall() -> None:
    """Remove the finder and the Lightning names it put in `sys.modules`."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, LightningFinder)]
    for name in [n for n in sys.modules if any(n == r or n.startswith(r + ".") for r in ROOTS)]:
        del sys.modules[name]


def script_code(path: str) -> types.CodeType:
    """The compiled code of the script at `path`."""
    with open(path, "rb") as f:
        return compile(f.read(), path, "exec", dont_inherit=True)


def run_script(script: str, args: Sequence[str]) -> None:
    """Run `script` as `__main__` with `args` as its command line, in Lightning mode.

    The script's `__main__` carries the spec `surge.lightning.script_main` (its `__file__` is the
    script's): a process that `multiprocessing` spawns re-imports the main module by that name and
    so runs in the mode too (see `script_main`). Ranks that surge starts are relaunched in it
    (`LightningFinder.relaunch`); forked processes inherit the finder."""
    path = Path(script)
    if not path.is_file():
        raise MisconfigurationError(
            f"surge run: script={script!r} is not a file; pass a Python script to run."
        )
    install()
    if (
        global_rank() == 0
    ):  # on stderr, as Lightning's own messages: stdout stays the script's (`--print_config`)
        sys.stderr.write(DIFFERENCES.format(script=path.name) + "\n")
    sys.argv = [str(path), *args]
    sys.path.insert(0, str(path.resolve().parent))
    os.environ[SCRIPT_VARIABLE] = str(path.resolve())
    main = types.ModuleType("__main__")
    spec = importlib.machinery.ModuleSpec(f"{__package__}.script_main", None)
    main.__dict__.update(__file__=str(path), __spec__=spec, __package__="", __loader__=None, __cached__=None)
    previous = sys.modules["__main__"]
    sys.modules["__main__"] = main
    try:
        exec(script_code(str(path)), main.__dict__)
    finally:
        sys.modules["__main__"] = previous
