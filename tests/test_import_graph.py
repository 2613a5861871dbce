"""surge's modules import each other without cycles, and `import surge` stays light.

The graph is built statically with `ast` over src/surge: every `import` / `from ... import`
at module level or inside functions counts, relative or absolute; imports under
`if TYPE_CHECKING:` are left out (they never run). `from pkg.mod import x` is an edge to
`pkg.mod` (to `pkg.mod.x` when that is a module), not to the package `pkg` it passes through.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "surge"

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


def test_find_cycle_reports_the_loop():
    graph = {"surge.a": {"surge.b"}, "surge.b": {"surge.c"}, "surge.c": {"surge.a"}, "surge.d": set()}
    assert find_cycle(graph, set()) == ["surge.a", "surge.b", "surge.c", "surge.a"]
    assert find_cycle(graph, {("surge.c", "surge.a")}) is None


def test_no_import_cycle_among_surge_modules():
    cycle = find_cycle(import_graph(), set())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


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
