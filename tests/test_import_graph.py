"""surge's modules import each other without cycles, its packages are layers, and `import surge`
stays light.

The graph is built statically with `ast` over src/surge: every `import` / `from ... import`
at module level or inside functions counts, relative or absolute; imports under
`if TYPE_CHECKING:` are left out (they never run). `from pkg.mod import x` is an edge to
`pkg.mod` (to `pkg.mod.x` when that is a module), not to the package `pkg` it passes through.
Lifted to packages (each direct subpackage or module of surge), an edge counts for the package
it passes through too: Python runs `pkg/__init__.py` before `pkg.mod`.
"""

from __future__ import annotations

import ast
import functools
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "surge"

# The layers of docs/architecture.md, from the bottom: a package imports only packages of its own
# layer or of one below (and no cycle, so never both ways).
LAYERS = (
    ("errors", "version", "rank_zero", "safe_files", "seed", "utilities", "_moved"),
    ("config", "checkpoint", "accelerators", "launch"),
    ("data",),
    ("module", "datamodule", "precision", "optim"),
    ("loggers", "metrics", "tune", "strategies"),
    ("callbacks",),
    ("speed", "profiler"),
    ("arguments", "loops"),
    ("assembly", "trainer"),
    ("stage_cli", "lightning", "cli", "demo", "__main__"),
)

# Edges (importer, imported) allowed to close a cycle; keep this minimal. A lower module that needs
# the Trainer only for a type imports it under TYPE_CHECKING instead.


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST):
    """Yield every Import/ImportFrom node outside `if TYPE_CHECKING:` bodies."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _resolve(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The surge modules an import statement loads (the deepest existing module of each name)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            base = module.split(".")
            base = base[: len(base) - node.level + (1 if is_package else 0)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        # `from pkg import sub` loads the module pkg.sub; `from pkg import name` loads pkg.
        names = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in known else prefix for a in node.names]
    targets = set()
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name:
            targets.add(name)
    return targets


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Map each module of `package` to the modules of it that it imports at run time."""
    files = {_module_name(p, package.parent): p for p in package.rglob("*.py")}
    known = set(files)
    graph = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        edges = set()
        for node in _runtime_imports(tree):
            edges |= _resolve(node, module, is_package, known)
        edges.discard(module)
        graph[module] = edges
    return graph


def find_cycle(graph: dict[str, set[str]], allowed: set[tuple[str, str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None."""
    edges = {m: sorted(t for t in targets if (m, t) not in allowed) for m, targets in graph.items()}
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in edges.get(node, ()):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (found := visit(start)):
            return found
    return None


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _lazy_names(package: Path) -> dict[str, str]:
    """The root's public names imported on first use (its `_LAZY` table): `surge.Trainer` -> surge.trainer."""
    tree = ast.parse((package / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_LAZY" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


def package_graph(graph: dict[str, set[str]], lazy: dict[str, str] | None = None) -> dict[str, set[str]]:
    """Each package of the root to the packages it imports at run time. The root itself is left out
    (every module runs it first); an `import surge` counts as importing each lazily exported name's
    package, as it may reach any of them."""
    root = min(graph, key=len)
    lazy_packages = {_package(m) for m in (lazy or {}).values()}
    lifted: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if module == root:
            continue
        edges = lifted.setdefault(_package(module), set())
        for target in targets:
            edges |= lazy_packages if target == root else {_package(target)}
    for name, edges in lifted.items():
        edges.discard(name)
    return lifted


def test_graph_sees_relative_absolute_and_function_level_imports(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "from .a import A\n",
        "a.py": "import os\nfrom . import b\nfrom .sub.c import C\nA = 1\n",
        "b.py": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from pkg.a import A\nelse:\n    import pkg.sub\n"
            "def f():\n    import pkg.sub.c\n"
        ),
        "sub/__init__.py": "",
        "sub/c.py": "from .. import A\nfrom ..b import f\nC = 2\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    assert import_graph(pkg) == {
        "pkg": {"pkg.a"},
        "pkg.a": {"pkg.b", "pkg.sub.c"},
        "pkg.b": {"pkg.sub", "pkg.sub.c"},
        "pkg.sub": set(),
        "pkg.sub.c": {"pkg", "pkg.b"},
    }
    assert find_cycle(import_graph(pkg), set()) == ["pkg", "pkg.a", "pkg.b", "pkg.sub.c", "pkg"]


def test_packages_are_lifted_through_their_init(tmp_path):
    graph = {
        "pkg": {"pkg.a"},
        "pkg.a": {"pkg.b.c", "pkg"},
        "pkg.b": {"pkg.a"},
        "pkg.b.c": {"pkg.d"},
        "pkg.d": set(),
        "pkg.e": {"pkg"},
    }
    assert package_graph(graph, {"Thing": "pkg.d"}) == {
        "pkg.a": {"pkg.b", "pkg.d"},  # `import pkg` may reach any name the root exports lazily
        "pkg.b": {"pkg.a", "pkg.d"},
        "pkg.d": set(),
        "pkg.e": {"pkg.d"},
    }


def test_find_cycle_reports_the_loop():
    graph = {"surge.a": {"surge.b"}, "surge.b": {"surge.c"}, "surge.c": {"surge.a"}, "surge.d": set()}
    assert find_cycle(graph, set()) == ["surge.a", "surge.b", "surge.c", "surge.a"]
    assert find_cycle(graph, {("surge.c", "surge.a")}) is None


def test_no_import_cycle_among_surge_modules():
    cycle = find_cycle(_surge_graph(), set())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


@functools.cache
def _surge_graph() -> dict[str, set[str]]:
    return import_graph()


@functools.cache
def _surge_packages() -> dict[str, set[str]]:
    return package_graph(_surge_graph(), _lazy_names(PACKAGE))


def test_no_two_packages_import_each_other_both_ways():
    packages = _surge_packages()
    both = sorted(f"{a} <-> {b}" for a in packages for b in packages[a] if a < b and a in packages.get(b, ()))
    assert both == [], both


def test_packages_import_only_their_own_layer_or_below():
    packages = _surge_packages()
    layer = {f"surge.{name}": i for i, names in enumerate(LAYERS) for name in names}
    assert sorted(set(packages) - set(layer)) == [], "a package with no layer: add it to LAYERS and docs"
    upward = sorted(f"{a} -> {b}" for a, targets in packages.items() for b in targets if layer[b] > layer[a])
    assert upward == [], upward
    cycle = find_cycle(packages, set())
    assert cycle is None, "package cycle: " + " -> ".join(cycle)


def test_import_surge_runs_only_the_foundation():
    root = _surge_graph()["surge"]
    assert {_package(m) for m in root} <= {f"surge.{name}" for name in LAYERS[0]}, sorted(root)


def test_every_module_imports_first_in_a_fresh_interpreter():
    """Each module alone in a fresh process (forked from one that loaded only third-party code): a
    package cycle that `import surge`'s order would hide fails here, wherever it is entered."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    script = Path(__file__).with_name("fresh_imports.py")
    out = subprocess.run(
        [sys.executable, str(script), str(SRC)], capture_output=True, text=True, check=True, env=env
    ).stdout
    report = json.loads(out.strip().splitlines()[-1])
    assert report["modules"] > 250
    assert report["failed"] == {}, report["failed"]


OPTIONAL_PACKAGES = {
    "torchmetrics",
    "jsonargparse",
    "safetensors",
    "matplotlib",
    "tensorboard",
    "torch.utils.tensorboard",
    "sklearn",
    "psutil",
    "mlflow",
    "wandb",
}


def test_import_surge_loads_no_optional_package():
    code = f"import surge, sys; print(sorted(set({sorted(OPTIONAL_PACKAGES)!r}) & set(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout
    assert out.strip() == "[]"


def test_import_surge_and_the_command_load_no_torch_until_a_name_is_used():
    """`import surge`, `surge --help`, `surge --version` and a mistyped command answer without torch;
    the first use of a public name imports what it needs; `dir()` and `import *` see every name."""
    code = (
        "import sys, surge\nbefore = 'torch' in sys.modules\n"
        "from surge.cli import main\n"
        "codes = []\n"
        "for argv in (['--help'], ['--version'], ['no-such-command'], ['launch', '--help']):\n"
        "    try:\n        main(argv)\n    except SystemExit as exit_:\n        codes.append(exit_.code)\n"
        "after = 'torch' in sys.modules\n"
        "missing = sorted(set(surge.__all__) - set(dir(surge)))\n"
        "names = {}\nexec('from surge import *', names)\n"
        "print(before, after, codes, missing, sorted(set(surge.__all__) - set(names)), 'torch' in sys.modules,"
        " surge.Trainer.__module__)"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout
    assert out.strip().splitlines()[-1] == "False False [0, 0, 2, 0] [] [] True surge.trainer"


def test_a_subpackage_is_an_attribute_and_an_unknown_name_an_attribute_error():
    import surge

    assert surge.tune is importlib.import_module("surge.tune")  # imported on first use, as before
    try:
        surge.NoSuchName  # noqa: B018
    except AttributeError as err:
        assert "NoSuchName" in str(err)
    else:
        raise AssertionError("surge.NoSuchName did not raise")


LAZY_PACKAGES = ("callbacks", "launch", "loggers", "profiler", "strategies", "tune")
NOT_IN_A_DEFAULT_FIT = (
    "surge.strategies.ddp", "surge.strategies.fsdp", "surge.strategies.model_parallel", "surge.strategies.dp",
    "surge.strategies.pipeline_stages", "surge.tune.batch_size", "surge.tune.auto_workers",
    "surge.profiler.doctor", "surge.profiler.advanced", "surge.callbacks.swa", "surge.callbacks.rich_progress",
    "surge.callbacks.batch_size_finder", "surge.callbacks.trainer_views", "surge.launch.multiprocessing_launcher",
    "surge.loggers.mlflow", "surge.loggers.wandb",
)  # fmt: skip


def test_a_default_fit_imports_no_module_it_does_not_use(tmp_path):
    """A package's names load with their own module (`config/lazy_names.py`): a default fit on one
    process imports no other strategy, tuner, profiler or callback. A strategy name not registered
    yet loads every built-in first, so a user's class that takes a built-in's name is refused at its
    registration, and every name resolves."""
    code = (
        "import sys, torch, surge\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "class M(surge.Module):\n"
        "    def __init__(self):\n        super().__init__(); self.l = torch.nn.Linear(2, 1)\n"
        "    def training_step(self, b, i):\n        return self.l(b[0]).sum()\n"
        "    def configure_optimizers(self):\n        return torch.optim.SGD(self.parameters(), lr=0.1)\n"
        "data = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)\n"
        f"surge.Trainer(max_steps=2, default_root_dir={str(tmp_path)!r}, enable_progress_bar=False)"
        ".fit(M(), train_dataloaders=data)\n"
        f"print(sorted(set({NOT_IN_A_DEFAULT_FIT!r}) & set(sys.modules)))\n"
        "from surge.strategies import register_strategy\n"
        "try:\n    register_strategy('fsdp')(type('Mine', (surge.strategies.Strategy,), {}))\n"
        "except surge.MisconfigurationError as err:\n    print('refused:', err)\n"
        "from surge.config.registry import STRATEGIES\n"
        "print(STRATEGIES.name_of('ddp_spawn'), 'surge.strategies.fsdp' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()[-3:]
    assert lines[0] == "[]", lines[0]
    assert lines[1].startswith("refused: strategy='fsdp' is registered already (for FSDPStrategy)"), lines[1]
    assert lines[2] == "ddp_spawn True"


@pytest.mark.parametrize("name", LAZY_PACKAGES)
def test_a_lazy_package_gives_every_name_it_lists(name):
    package = importlib.import_module(f"surge.{name}")
    assert set(package.__all__) <= set(dir(package))
    names: dict[str, object] = {}
    exec(f"from surge.{name} import *", names)  # noqa: S102
    assert set(package.__all__) <= set(names)
    for public in package.__all__:
        assert getattr(getattr(package, public), "__module__", "surge.").startswith("surge."), public
    with pytest.raises(AttributeError, match=f"'surge.{name}' has no attribute 'NoSuchName'"):
        package.NoSuchName  # noqa: B018


def _lazy_init_tree(name: str) -> ast.Module:
    return ast.parse((PACKAGE / name / "__init__.py").read_text())


def _type_checking_names(tree: ast.Module) -> set[str]:
    """The names a type checker sees at a package's top level: its imports (those under
    `if TYPE_CHECKING:` included), definitions and annotated or assigned names."""
    seen: set[str] = set()
    body = list(tree.body)
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            body += node.body
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            seen |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            seen.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            seen.add(node.target.id)
        elif isinstance(node, ast.Assign):
            seen |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return seen


@pytest.mark.parametrize("name", LAZY_PACKAGES)
def test_a_type_checker_sees_every_name_of_a_lazy_package_and_no_catch_all(name):
    """A module-level `__getattr__` that a type checker reads makes every attribute of the package
    `Any`: mypy would pass `from surge.callbacks import ModelChekpoint`. So it is installed only
    where type checkers do not look, and every public name is imported for them instead."""
    tree = _lazy_init_tree(name)
    top_level = _type_checking_names(tree)
    assert "__getattr__" not in top_level and "__dir__" not in top_level, name
    package = importlib.import_module(f"surge.{name}")
    assert set(package.__all__) <= top_level, sorted(set(package.__all__) - top_level)


def test_a_lazy_package_keeps_what_its_eager_form_gave(tmp_path):
    """In a fresh interpreter: threads that look strategy names up at once all find them (one
    imports the built-ins, the others wait for it, not for a registry half filled); a submodule is
    an attribute of its package without being imported first, as when the package imported them
    all; `PROFILERS` maps names to classes."""
    code = (
        "import threading, surge.callbacks, surge.strategies, surge.profiler\n"
        "from surge.config.registry import STRATEGIES\n"
        "found, names, start = {}, ('fsdp', 'ddp_spawn', 'dp', 'fsdp_cpu_offload'), threading.Barrier(4)\n"
        "def look(name):\n    start.wait(); found[name] = STRATEGIES.name_of(name)\n"
        "threads = [threading.Thread(target=look, args=(n,)) for n in names]\n"
        "[t.start() for t in threads]; [t.join() for t in threads]\n"
        "print(all(found[n] == n for n in names), found)\n"
        "print(surge.callbacks.swa.__name__, surge.strategies.dp.__name__)\n"
        "print(sorted((k, v.__name__) for k, v in surge.profiler.PROFILERS.items()))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("True "), lines[0]
    assert lines[1:] == [
        "surge.callbacks.swa surge.strategies.dp",
        "[('advanced', 'AdvancedProfiler'), ('pytorch', 'PyTorchProfiler'), ('simple', 'SimpleProfiler')]",
    ]


def test_a_registry_removes_a_built_in_not_loaded_yet_and_takes_a_class_of_no_module(tmp_path, monkeypatch):
    """`remove` of a built-in no lookup has loaded yet loads the built-ins first, then forgets it
    (a user replacing a built-in does this after `import surge.strategies`); a class whose
    `__module__` is None is a user's class."""
    from surge.config.registry import Registry
    from surge.errors import MisconfigurationError

    (tmp_path / "lazy_builtins").mkdir()
    (tmp_path / "lazy_builtins" / "__init__.py").write_text(
        "REGISTRY = None\nclass Builtin: ...\ndef load_all():\n    REGISTRY.add('builtin', Builtin, aliases=('b',))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = Registry("thing", "lazy_builtins")
    monkeypatch.setattr(importlib.import_module("lazy_builtins"), "REGISTRY", registry)
    registry.remove("builtin")
    assert registry.name_of("builtin") is None and registry.name_of("b") is None
    mine = type("Mine", (), {"__module__": None})
    registry.add("mine", mine)
    assert registry.get("mine") is mine
    with pytest.raises(MisconfigurationError, match="'mine' is registered already"):
        registry.add("mine", type("Other", (), {}))
