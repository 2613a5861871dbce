"""Lightning's own public-behaviour tests as a second oracle (development time, not collected by pytest).

    git clone https://github.com/Lightning-AI/pytorch-lightning /path/to/lightning   # once
    python tests/oracle/lightning_suite.py --repo /path/to/lightning [--keep DIR] [--only SUBSTRING]
    python tests/oracle/lightning_suite.py --repo /path/to/lightning --keep DIR --report   # tabulate a kept run

Takes the test files in `FILES` from a clone of Lightning's repository (`--repo`) at `TAG`, with the `tests_pytorch` helpers they
import, into a temporary directory (never into this project), and runs each file with pytest twice: under
real Lightning (the oracle's virtual environment) and under surge's Lightning mode (`surge run` of a tiny
launcher that calls `pytest.main`). Both runs use the same generated `conftest.py` and `RunIf` (Lightning's
own reach into its private modules), so they collect the same cases; each module-level Lightning import
is made one `try` per name (`per_name_imports`), so a missing name fails the cases that use it, not the file. Prints, per file: the cases that pass
under Lightning, those of them that pass under surge, and how many of those reach Lightning's private
internals (found by reading the test's source, see `reaches_internals`), then the same for the cases that
do not. With `--failures` it lists each case that passes under Lightning and fails under surge, with the
last line of its error.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from oracle_env import lightning_python

REPO = Path(".")  # a git clone of Lightning's repository (--repo)
TAG = "2.6.5"
BASE = "tests/tests_pytorch"
SRC = Path(__file__).resolve().parents[2] / "src"
FILES = (
    "callbacks/test_early_stopping.py",
    "checkpointing/test_model_checkpoint.py",
    "trainer/logging_/test_train_loop_logging.py",
    "trainer/logging_/test_eval_loop_logging.py",
    "trainer/optimization/test_manual_optimization.py",
    "trainer/optimization/test_multiple_optimizers.py",
    "trainer/flags/test_check_val_every_n_epoch.py",
    "trainer/flags/test_fast_dev_run.py",
    "trainer/flags/test_inference_mode.py",
    "trainer/flags/test_limit_batches.py",
    "trainer/flags/test_min_max_epochs.py",
    "trainer/flags/test_overfit_batches.py",
    "trainer/flags/test_val_check_interval.py",
    "core/test_datamodules.py",
    "models/test_hooks.py",
    "tuner/test_lr_finder.py",
    "tuner/test_scale_batch_size.py",
    "tuner/test_tuning.py",
    "strategies/launchers/test_multiprocessing.py",
    "strategies/launchers/test_subprocess_script.py",
    "strategies/test_common.py",
    "strategies/test_custom_strategy.py",
    "strategies/test_ddp.py",
    "strategies/test_ddp_integration.py",
    "strategies/test_fsdp.py",
    "strategies/test_model_parallel.py",
    "strategies/test_registry.py",
    "strategies/test_single_device.py",
    "plugins/precision/test_all.py",
    "plugins/precision/test_amp.py",
    "plugins/precision/test_deepspeed_precision.py",
    "plugins/precision/test_double.py",
    "plugins/precision/test_fsdp.py",
    "plugins/precision/test_half.py",
    "plugins/precision/test_transformer_engine.py",
    "plugins/test_amp_plugins.py",
    "plugins/test_async_checkpoint.py",
    "plugins/test_checkpoint_io_plugin.py",
    "plugins/test_cluster_integration.py",
    "utilities/test_all_gather_grad.py",
    "utilities/test_auto_restart.py",
    "utilities/test_combined_loader.py",
    "utilities/test_compile.py",
    "utilities/test_consolidate_checkpoint.py",
    "utilities/test_data.py",
    "utilities/test_enums.py",
    "utilities/test_exceptions.py",
    "utilities/test_grads.py",
    "utilities/test_imports.py",
    "utilities/test_memory.py",
    "utilities/test_model_helpers.py",
    "utilities/test_model_summary.py",
    "utilities/test_parameter_tying.py",
    "utilities/test_parsing.py",
    "utilities/test_pytree.py",
    "utilities/test_seed.py",
    "utilities/test_signature_utils.py",
    "utilities/test_types.py",
    "utilities/test_warnings.py",
    "utilities/testing/test_runif.py",
)

# Left out of strategies/, plugins/ and utilities/: no case passes under Lightning on a CPU (run at TAG:
# every case skipped, or it needs a device or package not here), or the file is about Lightning's own internals.
EXCLUDED = {
    "strategies/test_deepspeed.py": "DeepSpeed (not installed; surge has none): every case skipped",
    "strategies/test_ddp_integration_comm_hook.py": "CUDA only: every case skipped",
    "strategies/test_model_parallel_integration.py": "CUDA only: every case skipped",
    "strategies/test_xla.py": "XLA/TPU, through a fixture mocking XLA's presence",
    "plugins/precision/test_amp_integration.py": "CUDA only: every case skipped",
    "plugins/precision/test_bitsandbytes.py": "bitsandbytes on CUDA only (fails on a CPU under Lightning)",
    "plugins/precision/test_xla.py": "XLA/TPU, through a fixture mocking XLA's presence",
    "utilities/test_deepspeed_collate_checkpoint.py": "DeepSpeed and CUDA: every case skipped",
    "utilities/test_deepspeed_model_summary.py": "DeepSpeed and CUDA: every case skipped",
    "utilities/test_dtype_device_mixin.py": "CUDA only: every case skipped",
    "utilities/migration/test_migration.py": "Lightning's checkpoint migration internals (private `_set_version`, ...)",
    "utilities/migration/test_utils.py": "Lightning's checkpoint migration internals and its legacy checkpoints",
    "utilities/test_upgrade_checkpoint.py": "Lightning's checkpoint migration tool (`upgrade_checkpoint`)",
}

# Written into the temporary tests_pytorch/: our own fixtures (Lightning's conftest imports its internals).
CONFTEST = """
import os
import socket
import pytest
import torch

FRAMEWORK = os.environ["SUITE_FRAMEWORK"]


@pytest.fixture(autouse=True)
def _restore_state():
    env = os.environ.copy()
    yield
    os.environ.clear()
    os.environ.update(env)
    torch.use_deterministic_algorithms(False)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


@pytest.fixture(scope="session")
def datadir(tmp_path_factory):
    return tmp_path_factory.mktemp("datasets")


def mock_cuda_count(monkeypatch, n):
    _needs_lightning_internals(monkeypatch, "mock_cuda_count", n)


def _needs_lightning_internals(monkeypatch, name, n):
    if FRAMEWORK != "lightning":
        pytest.fail(f"fixture {name} patches Lightning's private device counting")
    import lightning.fabric.accelerators.cuda as fc
    import lightning.pytorch.accelerators.cuda as pc
    monkeypatch.setattr(fc, "num_cuda_devices", lambda: n)
    monkeypatch.setattr(pc, "num_cuda_devices", lambda: n)


@pytest.fixture
def cuda_count_0(monkeypatch):
    if torch.cuda.is_available():
        _needs_lightning_internals(monkeypatch, "cuda_count_0", 0)


@pytest.fixture
def cuda_count_1(monkeypatch):
    _needs_lightning_internals(monkeypatch, "cuda_count_1", 1)


@pytest.fixture
def cuda_count_2(monkeypatch):
    _needs_lightning_internals(monkeypatch, "cuda_count_2", 2)


@pytest.fixture
def cuda_count_4(monkeypatch):
    _needs_lightning_internals(monkeypatch, "cuda_count_4", 4)


@pytest.fixture
def mps_count_0():
    pass


@pytest.fixture
def single_process_pg():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")
    torch.distributed.init_process_group("gloo")
    yield
    torch.distributed.destroy_process_group()
"""

RUNIF = """
import importlib.util
import sys
import pytest
import torch
from packaging.version import Version

_TORCH = Version(torch.__version__.split("+")[0])
_MODULES = {"sklearn": "sklearn", "rich": "rich", "onnx": "onnx", "onnxruntime": "onnxruntime",
            "omegaconf": "omegaconf", "deepspeed": "deepspeed", "bitsandbytes": "bitsandbytes"}


def RunIf(**kwargs):
    reasons = []
    for key, value in kwargs.items():
        if key == "min_cuda_gpus":
            if torch.cuda.device_count() < value:
                reasons.append(f"{value} GPUs")
        elif key == "min_torch":
            if _TORCH < Version(value):
                reasons.append(f"torch>={value}")
        elif key == "max_torch":
            if _TORCH >= Version(value):
                reasons.append(f"torch<{value}")
        elif key == "min_python":
            if sys.version_info < tuple(int(p) for p in value.split(".")):
                reasons.append(f"python>={value}")
        elif key in _MODULES:
            if value and importlib.util.find_spec(_MODULES[key]) is None:
                reasons.append(key)
        elif key in ("skip_windows", "linux_only", "dynamo"):
            pass
        elif key == "mps":
            if value:
                reasons.append("mps")
        elif value:
            reasons.append(key)
    return pytest.mark.skipif(condition=bool(reasons), reason=f"Requires: {reasons}")


_xfail_gloo_windows = pytest.mark.skipif(False, reason="not Windows")
"""

MISSING = '''
import functools


class Missing:
    """Stands for a Lightning name the framework under test does not provide: using it fails the case."""

    def __init__(self, name, error):
        self._name, self._error = name, error

    def _fail(self, *args, **kwargs):
        raise ImportError(f"{self._name} is not provided: {self._error}")

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):  # used as a decorator at import
            return functools.wraps(args[0])(lambda *a, **k: self._fail())
        self._fail()

    def __getattr__(self, attr):
        if attr.startswith("__"):  # pytest naming a parametrized case asks for `__name__`
            raise AttributeError(attr)
        self._fail()

    def __mro_entries__(self, bases):  # a module-level class deriving from it: built, failing when used
        fail = self._fail
        return (type("MissingBase", (), {"__init__": lambda self, *a, **k: fail()}),)
'''

# Guarded: a rank started with "spawn" imports the main script again, as a user's script guarded by Lightning's rule.
LAUNCHER = """
import sys
import pytest
if __name__ == "__main__":
    sys.path.insert(0, sys.argv[1])
    sys.exit(pytest.main(sys.argv[2:]))
"""

# What a test reaching Lightning's internals looks like in its source (module-level helpers it uses included).
INTERNAL_ATTRS = {
    "epoch_loop", "batch_progress", "epoch_progress", "optim_progress", "val_loop", "test_loop",
    "predict_loop", "_results", "batch_loop", "manual_optimization", "automatic_optimization_loop",
    "checkpoint_connector", "strategy", "accelerator", "precision_plugin", "_logger_connector",
}  # fmt: skip
INTERNAL_FIXTURES = {
    "cuda_count_1",
    "cuda_count_2",
    "cuda_count_4",
    "xla_available",
    "tpu_available",
    "mps_count_1",
}


@dataclass
class FileResult:
    path: str
    cases: dict[str, dict[str, str]] = field(default_factory=dict)  # case -> framework -> status
    errors: dict[str, str] = field(default_factory=dict)  # case -> surge's message
    internal: set[str] = field(default_factory=set)


def git_show(path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), "show", f"{TAG}:{path}"], capture_output=True, text=True, check=True
    ).stdout


def per_name_imports(source: str) -> str:
    """Each module-level `from lightning... import a, b` (and `import lightning.x as y`) made one
    import per name, in `try`: a name the framework lacks becomes a `Missing` that fails only the
    cases that use it, instead of the whole file at collection. A no-op where every name exists."""
    lines = source.splitlines()
    tree = ast.parse(source)
    for node in reversed(tree.body):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            ("lightning", "pytorch_lightning")
        ):
            pairs = [
                (f"from {node.module} import {a.name} as {a.asname or a.name}", a.asname or a.name)
                for a in node.names
            ]
        elif isinstance(node, ast.Import) and all(
            a.name.startswith("lightning") and a.asname for a in node.names
        ):
            pairs = [(f"import {a.name} as {a.asname}", a.asname) for a in node.names]
        else:
            continue
        block = ["from tests_pytorch.suite_missing import Missing as _SuiteMissing"]
        for statement, bound in pairs:
            block += ["try:", f"    {statement}", "except ImportError as _err:",
                      f"    {bound} = _SuiteMissing({statement!r}, _err)"]  # fmt: skip
        lines[node.lineno - 1 : node.end_lineno] = block
    return "\n".join(lines) + "\n"


def imported_test_modules(source: str) -> dict[str, set[str]]:
    """Lightning's other test modules a test file imports names from (`from tests_pytorch.core.test_results
    import spawn_launch`), as paths under `BASE` -> the names: they are extracted too."""
    found: dict[str, set[str]] = {}
    for node in ast.parse(source).body:
        module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
        parts = module.split(".")
        if parts[0] == "tests_pytorch" and len(parts) > 2 and parts[1] != "helpers":
            found.setdefault("/".join(parts[1:]) + ".py", set()).update(
                a.asname or a.name for a in node.names
            )
    return found


def extract(root: Path) -> None:
    """The files, the `__init__.py` beside them and the helpers, with our conftest and RunIf."""
    listing = subprocess.run(
        ["git", "-C", str(REPO), "ls-tree", "-r", "--name-only", TAG, BASE],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    wanted = {f"{BASE}/{f}" for f in FILES} | {f"{BASE}/__init__.py"}
    wanted |= {p for p in listing if p.startswith(f"{BASE}/helpers/")}
    todo = list(FILES)
    while todo:  # the test modules they import, and those these import
        for module in imported_test_modules(git_show(f"{BASE}/{todo.pop()}")):
            if f"{BASE}/{module}" in listing and f"{BASE}/{module}" not in wanted:
                wanted.add(f"{BASE}/{module}")
                todo.append(module)
    wanted |= {
        p
        for p in listing
        if p.endswith("__init__.py") and any(Path(w).parent == Path(p).parent for w in wanted)
    }
    for path in sorted(wanted):
        target = root / Path(path).relative_to("tests")
        target.parent.mkdir(parents=True, exist_ok=True)
        text = git_show(path)
        if path.endswith(".py") and path != f"{BASE}/__init__.py":
            text = per_name_imports(text)
        target.write_text(text)
    (root / "tests_pytorch" / "conftest.py").write_text(CONFTEST)
    (root / "tests_pytorch" / "suite_missing.py").write_text(MISSING)
    (root / "tests_pytorch" / "helpers" / "runif.py").write_text(RUNIF)
    (root / "launcher.py").write_text(LAUNCHER)


def _private_imports(tree: ast.AST) -> set[str]:
    """Names a module imports from Lightning's private modules, or private names it imports."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            ("lightning", "pytorch_lightning")
        ):
            module = node.module or ""
            private_module = any(part in module for part in ("._", ".connectors", ".loops", ".launchers"))
            found |= {a.asname or a.name for a in node.names if private_module or a.name.startswith("_")}
    return found


def _flagged(node: ast.AST, private: set[str]) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute):
            on_self = isinstance(sub.value, ast.Name) and sub.value.id in ("self", "cls")
            if sub.attr in INTERNAL_ATTRS or (
                sub.attr.startswith("_") and not sub.attr.startswith("__") and not on_self
            ):
                return True
        elif (
            isinstance(sub, ast.Name)
            and sub.id in private
            or (
                isinstance(sub, ast.Constant)
                and isinstance(sub.value, str)
                and sub.value.startswith("lightning.")
            )
            or isinstance(sub, ast.arg)
            and sub.arg in INTERNAL_FIXTURES
        ):
            return True
    return False


def flagged_helpers(source: str) -> set[str]:
    """The module-level functions and classes of a test module that reach Lightning's internals."""
    tree = ast.parse(source)
    private = _private_imports(tree)
    return {
        n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef) and _flagged(n, private)
    }


def reaches_internals(source: str, imported: frozenset[str] = frozenset()) -> dict[str, bool]:
    """Test name -> whether its source (or a module-level helper it names) reaches Lightning's
    private internals: an underscore attribute of something not `self`, a private Lightning import,
    a patch of a `lightning.` target, a loop/connector attribute, or a fixture mocking devices.
    `imported`: names the file imports from other test modules that reach them (`flagged_helpers`)."""
    tree = ast.parse(source)
    private = _private_imports(tree) | imported
    top = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    found: dict[str, bool] = {}
    for name, node in top.items():
        tests: list[ast.AST] = [node] if name.startswith("test") else []
        if isinstance(node, ast.ClassDef) and name.startswith("Test"):
            tests = [m for m in node.body if isinstance(m, ast.FunctionDef) and m.name.startswith("test")]
        for test in tests:
            helpers = [top[n] for n in _helpers_used(test, top)]
            found[getattr(test, "name", name)] = any(_flagged(h, private) for h in [test, *helpers])
    return found


def _helpers_used(node: ast.AST, top: dict[str, ast.AST]) -> set[str]:
    """The module-level functions and classes `node` names, and those they name, transitively
    (a test calling `_fit_model`, which builds a model class that reaches a private attribute)."""
    seen: set[str] = set()
    todo = [node]
    while todo:
        for sub in ast.walk(todo.pop()):
            if (
                isinstance(sub, ast.Name)
                and sub.id in top
                and sub.id not in seen
                and not sub.id.startswith("test")
            ):
                seen.add(sub.id)
                todo.append(top[sub.id])
    return seen


def run_file(root: Path, rel: str, framework: str, timeout: float, reuse: bool = False) -> Path:
    xml = root / "results" / framework / (rel.replace("/", "__") + ".xml")
    xml.parent.mkdir(parents=True, exist_ok=True)
    if reuse and xml.exists():
        return xml
    xml.unlink(missing_ok=True)
    args = [f"tests_pytorch/{rel}", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", f"--junitxml={xml}",
            "-o", "addopts=", "--rootdir", str(root)]  # fmt: skip
    if framework == "lightning":
        cmd = [str(lightning_python()), "-m", "pytest", *args]
    else:
        cmd = [sys.executable, "-m", "surge.lightning", str(root / "launcher.py"), str(root), *args]
    env = {
        **os.environ,
        "SUITE_FRAMEWORK": framework,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": f"{root}{os.pathsep}{SRC}",
    }
    with contextlib.suppress(subprocess.TimeoutExpired):
        subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    return xml


def read_results(xml: Path) -> dict[str, tuple[str, str]]:
    """Case -> (status, the last line of its error) from a junit file (empty when the run died)."""
    if not xml.exists():
        return {}
    out = {}
    for case in ET.parse(xml).iter("testcase"):
        status, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                status = "skipped" if child.tag == "skipped" else "failed"
                message = (child.get("message") or "").strip().splitlines()[:1]
                message = message[0][:200] if message else ""
        out[case.get("name", "")] = (status, message)
    return out


def collect(root: Path, rel: str, timeout: float, reuse: bool, report: bool = False) -> FileResult:
    result = FileResult(rel)
    for framework in ("lightning", "surge"):
        xml = run_file(root, rel, framework, timeout, report or (reuse and framework == "lightning"))
        for case, (status, message) in read_results(xml).items():
            result.cases.setdefault(case, {})[framework] = status
            if framework == "surge" and status != "passed":
                result.errors[case] = message
    source = (root / "tests_pytorch" / rel).read_text()
    imported = {"mock_cuda_count"}  # our conftest's, patching Lightning's device counting
    for module, names in imported_test_modules(source).items():
        if (root / "tests_pytorch" / module).exists():
            imported |= names & flagged_helpers((root / "tests_pytorch" / module).read_text())
    internal = reaches_internals(source, frozenset(imported))
    result.internal = {case for case in result.cases if internal.get(case.split("[")[0], False)}
    return result


def table(results: list[FileResult]) -> str:
    rows = ["| file | pass under Lightning | of those, pass under surge | reach internals (pass under surge) | "
            "public (pass under surge) |", "|---|---|---|---|---|"]  # fmt: skip
    totals = [0, 0, 0, 0, 0, 0]
    for r in results:
        ok = [c for c, s in r.cases.items() if s.get("lightning") == "passed"]
        both = [c for c in ok if r.cases[c].get("surge") == "passed"]
        internal = [c for c in ok if c in r.internal]
        public = [c for c in ok if c not in r.internal]
        nums = [len(ok), len(both), len(internal), len([c for c in internal if c in both]), len(public),
                len([c for c in public if c in both])]  # fmt: skip
        totals = [t + n for t, n in zip(totals, nums)]
        rows.append(f"| {r.path} | {nums[0]} | {nums[1]} | {nums[2]} ({nums[3]}) | {nums[4]} ({nums[5]}) |")
    t = totals
    rows.append(f"| **total** | {t[0]} | {t[1]} | {t[2]} ({t[3]}) | {t[4]} ({t[5]}) |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--repo", type=Path, required=True, help=f"a git clone of Lightning's repository (tag {TAG})"
    )
    parser.add_argument("--keep", type=Path, help="extract and run here (kept afterwards)")
    parser.add_argument(
        "--only", default="", help="run only the files whose path contains one of these (comma-separated)"
    )
    parser.add_argument("--timeout", type=float, default=900, help="seconds per file and framework")
    parser.add_argument("--reuse", action="store_true", help="with --keep: reuse Lightning's results there")
    parser.add_argument(
        "--report",
        action="store_true",
        help="with --keep: run nothing, tabulate both frameworks' results there",
    )
    parser.add_argument("--failures", action="store_true", help="list the cases surge fails")
    ns = parser.parse_args()
    global REPO
    REPO = ns.repo
    with tempfile.TemporaryDirectory(prefix="lightning-suite-") as tmp:
        root = ns.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        if not ns.report:
            extract(root)
        results = [
            collect(root, rel, ns.timeout, ns.reuse, ns.report)
            for rel in FILES
            if any(part in rel for part in ns.only.split(","))
        ]
        print(table(results))
        if ns.failures:
            for r in results:
                for case, s in r.cases.items():
                    if s.get("lightning") == "passed" and s.get("surge") != "passed":
                        tag = " [internals]" if case in r.internal else ""
                        print(f"{r.path}::{case}{tag}: {r.errors.get(case, 'not collected')}")


if __name__ == "__main__":
    main()
