"""The layering DESIGN.md promises, checked on the source: nothing below the Trainer reads or
writes its private attributes, and no source file grows past what one concept needs."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "surge"
# `trainer._x`, `self.trainer._x`, `module._trainer._x`, `t._x`: a private attribute of a Trainer.
PRIVATE_READ = re.compile(r"(?:^|[^\w])(?:trainer|_trainer|t|tr)\._[A-Za-z]\w*")
MAX_FUNCTION_LINES = 60  # a file is split where its concept splits; a function where its steps do
LONGER_FUNCTIONS = {  # each named, with why it is longer, and the most lines it may take
    "cli/main.py:build_parser": (90, "a table of argparse declarations, one command after another"),
    "loggers/mlflow.py:__init__": (70, "MLFlowLogger's arguments, each checked before a run is created"),
    "arguments/__init__.py:__post_init__": (70, "the Trainer's arguments checked in one place, each with its own message"),
}  # fmt: skip
# `trainer: Any` parameters and attributes: none (the loops' hooks and stage entry take the Trainer,
# the public API a hook receives; helpers a Protocol of callbacks/trainer_views.py).
MAX_TRAINER_ANY = 0
UNTYPED = {"Any", "typing.Any", "Any | None", "None | Any", "Optional[Any]"}


def sources() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_no_module_below_the_trainer_reaches_into_it():
    found = [
        f"{path.relative_to(SRC)}:{number}: {line.strip()}"
        for path in sources()
        if path.parent != SRC / "trainer"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if PRIVATE_READ.search(line)
    ]
    assert not found, "private Trainer attributes used outside surge/trainer/:\n" + "\n".join(found)


def test_the_pattern_catches_what_it_is_for():
    for line in (
        "x = trainer._cfg",
        "self.trainer._publish(m)",
        "if t._module is None:",
        "m._trainer._hooks",
    ):
        assert PRIVATE_READ.search(line), line
    for line in ("trainer.global_step", "batch._asdict()", "self._trainer = trainer", "torch._C"):
        assert not PRIVATE_READ.search(line), line


def test_no_function_is_over_its_size():
    too_long = {}
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{path.relative_to(SRC)}:{node.name}"
                lines = node.end_lineno - node.lineno + 1
                if lines > LONGER_FUNCTIONS.get(name, (MAX_FUNCTION_LINES, ""))[0]:
                    too_long[name] = lines
    assert not too_long, (
        f"functions over {MAX_FUNCTION_LINES} lines (or over their named allowance): {too_long}"
    )


def trainer_any(tree: ast.AST) -> list[int]:
    """Lines of a parameter or attribute named `*trainer` annotated `Any` (or `Any | None`)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            name, annotation = node.arg, node.annotation
        elif isinstance(node, ast.AnnAssign):
            target = node.target
            name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", "")
            annotation = node.annotation
        else:
            continue
        if annotation is None or not name.endswith("trainer"):
            continue
        text = annotation.value if isinstance(annotation, ast.Constant) else ast.unparse(annotation)
        if str(text).replace(" ", "").replace("|", " | ") in UNTYPED:
            found.append(node.lineno)
    return sorted(found)


def test_the_trainer_is_typed_by_what_each_part_uses():
    found = {
        str(path.relative_to(SRC)): lines
        for path in sources()
        if (lines := trainer_any(ast.parse(path.read_text())))
    }
    outside_loops = {path: lines for path, lines in found.items() if not path.startswith("loops/")}
    assert not outside_loops, (
        f"`trainer: Any` outside loops/ (type it Trainer or a Protocol): {outside_loops}"
    )
    count = sum(len(lines) for lines in found.values())
    assert count <= MAX_TRAINER_ANY, f"{count} `trainer: Any` (at most {MAX_TRAINER_ANY}): {found}"


def test_the_trainer_any_count_sees_every_form():
    snippet = """
def hook(self, trainer: Any, module: Any) -> None: ...
def tuned(trainer: 'Any | None' = None, *, pl_trainer: typing.Any) -> None: ...
class Part:
    trainer: Any = None
    def __init__(self) -> None:
        self._trainer: Any | None = None
def typed(trainer: Trainer, other: Any, trainers: Any) -> None: ...
"""
    assert trainer_any(ast.parse(snippet)) == [2, 3, 3, 5, 7]
