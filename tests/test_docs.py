"""Every python block in docs/*.md and the README runs, in order, in a fresh namespace per page;
every shell line of the README and of docs/first_hour.md runs too, as a user would type it."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest

import script_server

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
PAGES = [
    p for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))] if BLOCK.search(p.read_text())
]
# Pages whose shell lines run here, in their order, in one folder (a copy of examples/ in it):
# a block opened with ```LANG file=NAME is written to NAME there, for the lines after it to use.
SHELL_PAGES = [ROOT / "README.md", ROOT / "docs" / "first_hour.md"]
FENCE = re.compile(r"```(\w+)( file=\S+)?\n(.*?)```", re.DOTALL)
# Lines not run here: where they run instead, and what that file holds to run them.
ELSEWHERE = {
    "python -m pytest -q -rs": (".ci/run", "python -m pytest"),  # the suite itself
    # 20 epochs (17 s), timed there; docs/first_hour.md runs the same command with --epochs 1
    "python -m surge.demo": ("benchmarks/quickstart.py", '"-m", "surge.demo"'),
}
# What a block may import that only the `test-services` extra installs: without it, the page runs up
# to that block and the test skips, naming the extra (the README's plain test command then passes).
SERVICES = ("mlflow", "wandb", "transformers")
PYPROJECT = (ROOT / "pyproject.toml").read_text()
EXTRAS = set(
    re.findall(r"^([\w-]+) = \[", PYPROJECT.split("[project.optional-dependencies]")[1].split("\n[")[0], re.M)
)


def test_the_pages_with_code_are_found():
    assert {p.name for p in PAGES} >= {
        "README.md",
        "trainer.md",
        "precision.md",
        "devices.md",
        "distributed.md",
    }


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_docs_snippets_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    for i, code in enumerate(BLOCK.findall(page.read_text())):
        missing = [m for m in imported(code) if m in SERVICES and importlib.util.find_spec(m) is None]
        if missing:
            pytest.skip(
                f"{page.name} block {i} imports {missing[0]} (the blocks before it ran): "
                'pip install -e ".[test-services]"'
            )
        exec(compile(code, f"{page.name}[block {i}]", "exec"), namespace)


def imported(code: str) -> set[str]:
    """The top-level modules a block imports."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def commands(script: str) -> list[list[str]]:
    """The commands of a shell block: `\\` continues a line, `#` starts a comment, `&&` separates."""
    out: list[list[str]] = []
    for line in script.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        while words:
            end = words.index("&&") if "&&" in words else len(words)
            out.append(words[:end])
            words = words[end + 1 :]
    return out


def argv_of(words: list[str]) -> list[str] | None:
    """The interpreter's arguments for a command a user types; None for one that installs."""
    if words[0] == "pip":
        named = [w for w in words if w.startswith(".[")]
        for extras in named:  # every extra a page names exists
            assert set(extras[2:-1].split(",")) <= set(EXTRAS), extras
        return None
    if words[0] == "surge":  # the installed script: the folder on sys.path is not the cwd
        return [str(Path(sys.executable).with_name("surge")), *words[1:]]
    assert words[0] == "python", f"a docs command this test does not know how to run: {words}"
    return words[1:]


def test_the_lines_run_elsewhere_are_run_there():
    for path, holds in ELSEWHERE.values():
        assert holds in (ROOT / path).read_text(), path
    assert {"demo", "cli", "test", "export"} <= EXTRAS


def test_shell_lines_are_parsed_as_a_shell_would():
    assert commands("pip install -e '.[demo]' && python -m x   # a comment\nsurge fit \\\n  --config a.yaml\n") == [
        ["pip", "install", "-e", ".[demo]"], ["python", "-m", "x"], ["surge", "fit", "--config", "a.yaml"],
    ]  # fmt: skip


@pytest.mark.parametrize("page", SHELL_PAGES, ids=lambda p: p.name)
def test_shell_lines_run(page, tmp_path):
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1", "COLUMNS": "100"}
    ran = 0
    for lang, file, text in FENCE.findall(page.read_text()):
        if file:
            name = file.removeprefix(" file=")
            shown = ROOT / name
            assert not shown.exists() or shown.read_text() == text, f"{page.name} shows {name} as it is not"
            (tmp_path / name).write_text(text)
            continue
        if lang != "bash":
            continue
        for words in commands(text):
            argv = argv_of(words)
            if argv is None or shlex.join(words) in ELSEWHERE:
                continue
            run = script_server.run(sys.executable, argv, cwd=tmp_path, env=env, preload=("torch", "surge"))
            assert run.returncode == 0, f"{shlex.join(words)}\n{run.stdout[-2000:]}\n{run.stderr[-3000:]}"
            ran += 1
    assert ran >= 3


def test_relative_links_lead_to_files():
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for link in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            assert link.startswith(("http://", "https://")) or (page.parent / link).exists(), (
                page.name,
                link,
            )
    readme = (ROOT / "README.md").read_text().split("## Documentation", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"\]\((docs/\w+\.md)\)", readme))
    assert listed == {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}  # every page, linked


def test_the_first_hour_reads_in_short_sentences():
    text = re.sub(r"```.*?```", "", (ROOT / "docs" / "first_hour.md").read_text(), flags=re.DOTALL)
    parts = [p for p in re.split(r"\n\s*\n|\n- |^#.*$", text, flags=re.MULTILINE) if p and p.strip()]
    sentences = [
        s.split() for p in parts for s in re.split(r"(?<=[.!?:])\s+(?=[A-Z`\[])", " ".join(p.split()))
    ]
    lengths = [len(s) for s in sentences if len(s) > 1]
    assert sum(lengths) / len(lengths) < 14 and max(lengths) < 20, sorted(lengths)[-5:]
