"""A census of the Lightning names real projects import (development time, not collected by pytest).

    python tests/oracle/census.py --scan DIR --repo owner/name --kind vision [--under examples/pytorch]
    python tests/oracle/census.py --check [--failures]    # re-check the committed names, no network
    python tests/oracle/census.py --markdown              # the table for docs/lightning.md
    python tests/oracle/census.py --write-docs            # ... written into it

`--scan` reads every .py file of a checkout or a bare git directory (its HEAD) with `ast`, never running
the project's code, and lists each Lightning name it imports (`lightning`, `lightning.pytorch`,
`lightning.fabric`, `pytorch_lightning`, `lightning_fabric`): `import a.b`, `from a.b import c`, and the
attribute chains of an alias (`import pytorch_lightning as pl; pl.callbacks.ModelCheckpoint`), up to the
first capitalised name. An import inside `try: ... except ImportError` (or `Exception`) or under
`if TYPE_CHECKING:` is *guarded*: the project does not need it. Tests, docs and benchmarks are skipped.
The names (facts, no project code) go into `census_projects.json` with the repository and commit.

Each name is then imported in a subprocess under surge's Lightning mode and under real Lightning 2.6.6
(the oracle's environment), and classified: `provided`; `refused at use` (it imports as a stand-in that
raises surge's `LightningNameError`, with its reason, when used); `fails at import` (any failure to import
under surge of a name Lightning has, or a module where Lightning has another kind: a bug); `not in 2.6.6`
(Lightning itself lacks it: an old 1.x name, which counts against neither). Lightning's verdicts are kept
in the JSON so the test re-checks only surge's side.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "census_projects.json"
SRC = HERE.parents[1] / "src"
ROOTS = ("lightning", "pytorch_lightning", "lightning_fabric")
SKIP_DIRS = {"tests", "test", "testing", "docs", "doc", "benchmarks", "_notebooks", ".github"}
GUARDS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def lightning_root(module: str) -> bool:
    return any(module == r or module.startswith(r + ".") for r in ROOTS)


@dataclass
class Names:
    """What one project imports: names it needs, and names it imports under a guard."""

    needed: set[str] = field(default_factory=set)
    guarded: set[str] = field(default_factory=set)
    configs: set[str] = field(default_factory=set)  # `_target_:` / `class_path:` in YAML configs

    def add(self, name: str, guarded: bool) -> None:
        (self.guarded if guarded else self.needed).add(name)

    def result(self) -> tuple[list[str], list[str], list[str]]:
        return sorted(self.needed), sorted(self.guarded - self.needed), sorted(self.configs)


def spelled(module: str, parts: list[str]) -> str:
    """`module` for an imported module; `module:a.b` for `from module import a` then `.b`."""
    return f"{module}:{'.'.join(parts)}" if parts else module


def _guarding(node: ast.AST) -> bool:
    """Whether a `try` catches an import's failure, or an `if` reads TYPE_CHECKING."""
    if isinstance(node, ast.Try):
        for handler in node.handlers:
            kinds = handler.type
            elts = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
            if kinds is None or any(getattr(e, "id", getattr(e, "attr", "")) in GUARDS for e in elts):
                return True
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


class Scanner(ast.NodeVisitor):
    """Collects one file's Lightning imports and the attribute chains on the names they bind."""

    def __init__(self, names: Names) -> None:
        self.names = names
        self.bound: dict[str, tuple[str, list[str]]] = {}  # local name -> (module, attribute parts)
        self.guards = 0

    def generic_visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Try) and _guarding(node):
            self.guards += 1
            for child in node.body:
                self.visit(child)
            self.guards -= 1
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                self.visit(child)
            return
        if isinstance(node, ast.If) and _guarding(node):
            self.guards += 1
            super().generic_visit(node)
            self.guards -= 1
            return
        super().generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if not lightning_root(alias.name):  # `import polars as pl` rebinds the name
                self.bound.pop(alias.asname or alias.name.split(".")[0], None)
            elif lightning_root(alias.name):
                self.names.add(alias.name, self.guards > 0)
                local = alias.asname or alias.name.split(".")[0]
                self.bound[local] = (alias.name if alias.asname else local, [])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level or not lightning_root(module):
            for alias in node.names:
                self.bound.pop(alias.asname or alias.name, None)
            return
        for alias in node.names:
            if alias.name == "*":
                self.names.add(module, self.guards > 0)
                continue
            self.names.add(spelled(module, [alias.name]), self.guards > 0)
            self.bound[alias.asname or alias.name] = (module, [alias.name])

    def visit_Attribute(self, node: ast.Attribute) -> None:
        chain: list[str] = []
        inner: ast.AST = node
        while isinstance(inner, ast.Attribute):
            chain.insert(0, inner.attr)
            inner = inner.value
        if isinstance(inner, ast.Name) and inner.id in self.bound and isinstance(node.ctx, ast.Load):
            module, parts = self.bound[inner.id]
            parts = list(parts)
            for part in chain:
                if parts and parts[-1][:1].isupper():
                    break
                parts.append(part)
            if parts != self.bound[inner.id][1]:
                self.names.add(spelled(module, parts), self.guards > 0)
            return  # the chain is one use; its inner attributes are not others
        self.generic_visit(node)


TARGET = re.compile(r"^\s*-?\s*(?:_target_|class_path)\s*:\s*[\"']?([\w.]+)", re.MULTILINE)


def scan_sources(sources: Iterable[tuple[str, str]]) -> tuple[Names, int]:
    """The Lightning names in `(path, text)` pairs, and how many files use Lightning."""
    names, files = Names(), 0
    for path, text in sources:
        if not any(root in text for root in ROOTS):
            continue
        if not path.endswith(".py"):  # a config naming a class for hydra or LightningCLI to import
            found = {t.rpartition(".") for t in TARGET.findall(text) if lightning_root(t)}
            names.configs.update(f"{module}:{name}" for module, _, name in found if module)
            files += bool(found)
            continue
        try:
            tree = ast.parse(text, filename=path)
        except (SyntaxError, ValueError):
            continue
        before = len(names.needed) + len(names.guarded)
        scanner = Scanner(names)
        scanner.visit(tree)
        files += len(names.needed) + len(names.guarded) > before or bool(scanner.bound)
    return names, files


def wanted(path: str, under: str) -> bool:
    parts = path.split("/")
    if not path.endswith((".py", ".yaml", ".yml")) or (
        under and not path.startswith(under.rstrip("/") + "/")
    ):
        return False
    name = parts[-1]
    skip = name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"
    return not skip and not SKIP_DIRS.intersection(parts[:-1])


def git(gitdir: Path, *args: str, data: bytes | None = None) -> bytes:
    return subprocess.run(
        ["git", f"--git-dir={gitdir}", *args], input=data, capture_output=True, check=True
    ).stdout


def read_tree(source: Path, under: str) -> tuple[str, Iterator[tuple[str, str]]]:
    """The commit of a checkout or bare git directory and its wanted .py files as `(path, text)`."""
    gitdir = source if (source / "objects").is_dir() else source / ".git"
    if not (source / "objects").is_dir() and not gitdir.exists():  # a plain directory
        found = [
            p for p in source.rglob("*") if p.is_file() and wanted(p.relative_to(source).as_posix(), under)
        ]
        return "", ((p.relative_to(source).as_posix(), p.read_text(errors="replace")) for p in found)
    commit = git(gitdir, "rev-parse", "HEAD").decode().strip()
    listing = git(gitdir, "ls-tree", "-r", "HEAD").decode().splitlines()
    blobs = [(line.split("\t", 1)[1], line.split()[2]) for line in listing if " blob " in line]
    blobs = [(path, sha) for path, sha in blobs if wanted(path, under)]
    out = git(gitdir, "cat-file", "--batch", data="".join(f"{sha}\n" for _, sha in blobs).encode())

    def texts() -> Iterator[tuple[str, str]]:
        at = 0
        for path, _ in blobs:
            header_end = out.index(b"\n", at)
            size = int(out[at:header_end].split()[2])
            yield path, out[header_end + 1 : header_end + 1 + size].decode(errors="replace")
            at = header_end + 2 + size

    return commit, texts()


# Run in a subprocess: imports each name (JSON list on stdin) and prints a verdict per name.
CHECKER = r"""
import importlib, json, sys, types
if sys.argv[1] == "surge":
    from surge.lightning.mode import install
    from surge.lightning.refuse import LightningNameError
    from surge.lightning.standins import refusal
    install()
else:
    LightningNameError = ()
    refusal = lambda obj: None

def kind(obj):
    return "module" if isinstance(obj, types.ModuleType) else "class" if isinstance(obj, type) else "other"

def resolve(name):
    module, _, chain = name.partition(":")
    parts = chain.split(".") if chain else []
    scope = {}
    if parts:
        exec(f"from {module} import {parts[0]} as found", scope)
    else:
        exec(f"import {module} as found", scope)
    obj, path = scope["found"], f"{module}.{parts[0]}" if parts else module
    for part in parts[1:]:
        try:
            obj = getattr(obj, part)
        except AttributeError:
            if not isinstance(obj, types.ModuleType):
                raise
            obj = importlib.import_module(f"{path}.{part}")  # what the project's own import would do
        path = f"{path}.{part}"
    return obj

verdicts = {}
for name in json.load(sys.stdin):
    try:
        found = resolve(name)
        why = refusal(found)
        verdicts[name] = ["standin", why.split("; docs/")[0]] if why else ["ok", kind(found)]
    except LightningNameError as err:
        verdicts[name] = ["refused", str(err).split("; docs/")[0]]
    except BaseException as err:
        verdicts[name] = ["error", f"{type(err).__name__}: {err}".splitlines()[0][:300]]
sys.stdout.write("\n" + json.dumps(verdicts) + "\n")
"""


def check(names: list[str], framework: str) -> dict[str, list[str]]:
    """Each name's verdict under `framework` ("surge": its Lightning mode; "lightning": the oracle)."""
    if framework == "surge":
        python, env = sys.executable, {**os.environ, "PYTHONPATH": str(SRC)}
    else:
        sys.path.insert(0, str(HERE))
        from oracle_env import lightning_python

        python, env = str(lightning_python()), {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONWARNINGS"] = "ignore"
    done = subprocess.run(
        [python, "-c", CHECKER, framework],
        input=json.dumps(names),
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


PROVIDED, AT_USE, AT_IMPORT, ABSENT = "provided", "refused at use", "fails at import", "not in 2.6.6"


def classify(name: str, surge: list[str], lightning: list[str]) -> tuple[str, str]:
    """A name's class and the message that explains it (empty when it is provided)."""
    if lightning[0] != "ok":
        return ABSENT, lightning[1]
    if surge[0] == "standin":
        return AT_USE, surge[1]
    if surge[0] != "ok":
        return AT_IMPORT, surge[1]
    if surge[1] == "module" and lightning[1] != "module":
        return AT_IMPORT, f"a module under surge, a {lightning[1]} in Lightning"
    return PROVIDED, ""


@dataclass
class Census:
    """The committed projects, Lightning's verdicts and surge's, classified."""

    data: dict
    surge: dict[str, list[str]]

    @classmethod
    def load(cls, surge: dict[str, list[str]] | None = None) -> Census:
        data = json.loads(DATA.read_text())
        names = sorted({n for p in data["projects"] for n in p["names"] + p["guarded"] + p["configs"]})
        return cls(data, surge if surge is not None else check(names, "surge"))

    def verdict(self, name: str) -> tuple[str, str]:
        return classify(name, self.surge[name], self.data["lightning_2_6_6"][name])

    def passes(self, project: dict) -> bool:
        """Whether the project gets past its imports: every name it needs is provided or refused at use."""
        return all(self.verdict(n)[0] in (PROVIDED, AT_USE) for n in project["names"])

    def provided(self, project: dict) -> bool:
        """Whether every name the project needs is provided (none is refused at use)."""
        return all(self.verdict(n)[0] == PROVIDED for n in project["names"])

    def current(self, project: dict) -> bool:
        """Whether every name the project needs exists in Lightning 2.6.6."""
        return all(self.verdict(n)[0] != ABSENT for n in project["names"])

    def shares(self) -> tuple[int, int, int, int, int]:
        """(passing, projects, passing among current, current projects, all provided among current)."""
        projects = self.data["projects"]
        current = [p for p in projects if self.current(p)]
        return (
            sum(map(self.passes, projects)),
            len(projects),
            sum(map(self.passes, current)),
            len(current),
            sum(map(self.provided, current)),
        )

    def by_class(self, which: str, field: str = "names") -> Counter[str]:
        """Names of one class (one spelling each, `short`), counted by the projects that need them."""
        return Counter(
            short(n)
            for p in self.data["projects"]
            for n in {short(n): n for n in p[field] if self.verdict(n)[0] == which}.values()
        )

    def why(self, shortened: str, which: str) -> str:
        """The message of a name of class `which`, written as `short` gives it."""
        return next(v[1] for n in self.surge if short(n) == shortened and (v := self.verdict(n))[0] == which)


def save_project(project: dict) -> None:
    """Add (or replace, by repository and folder) a project in the data file and refresh Lightning's
    verdicts for every name in it."""
    data = json.loads(DATA.read_text()) if DATA.exists() else {"projects": [], "lightning_2_6_6": {}}
    key = (project["repo"], project["under"])
    data["projects"] = [p for p in data["projects"] if (p["repo"], p["under"]) != key] + [project]
    data["projects"].sort(key=lambda p: (p["kind"], p["repo"].lower(), p["under"]))
    names = sorted({n for p in data["projects"] for n in p["names"] + p["guarded"] + p["configs"]})
    known = data["lightning_2_6_6"]
    fresh = [n for n in names if n not in known]
    known.update(check(fresh, "lightning") if fresh else {})
    data["lightning_2_6_6"] = {n: known[n] for n in names}
    DATA.write_text(json.dumps(data, indent=1) + "\n")


def scan(source: Path, repo: str, kind: str, under: str) -> dict:
    commit, texts = read_tree(source, under)
    names, files = scan_sources(texts)
    needed, guarded, configs = names.result()
    return {"repo": repo, "commit": commit, "kind": kind, "under": under, "files": files,
            "names": needed, "guarded": guarded, "configs": configs}  # fmt: skip


def short(name: str) -> str:
    """One spelling per name, the way docs write it: `from pytorch_lightning.loggers import X`,
    `pl.loggers.X` and `lightning.pytorch.loggers.X` are all `lightning.pytorch.loggers.X`."""
    dotted = name.replace(":", ".")
    for old, new in (("pytorch_lightning", "lightning.pytorch"), ("lightning_fabric", "lightning.fabric")):
        if dotted == old or dotted.startswith(old + "."):
            return new + dotted[len(old) :]
    return dotted


def report(census: Census, failures: bool) -> str:
    passing, total, current_passing, current, provided = census.shares()
    lines = [
        f"projects that get past all their imports under surge: {passing} of {total}",
        f"  of those whose imports all exist in Lightning 2.6.6: {current_passing} of {current}",
        f"  ... with every name provided (none refused at use): {provided} of {current}",
    ]
    for which in (AT_IMPORT, AT_USE, ABSENT):
        counted = census.by_class(which)
        lines.append(f"\n{which} ({len(counted)} names), by number of projects:")
        for name, n in counted.most_common(None if failures else 25):
            lines.append(f"  {n:3d}  {name}    {census.why(name, which)[:160]}")
    return "\n".join(lines)


TOP = 30  # refused names listed in docs


def listed(census: Census, names: list[str], most: int = 6) -> str:
    """The names among `names` refused at use (or failing at import), one spelling each, the first `most`."""
    bad = sorted(
        {short(n): census.verdict(n)[0] for n in names if census.verdict(n)[0] in (AT_USE, AT_IMPORT)}.items()
    )
    marks = [f"`{n}`" + (" (fails at import)" if which == AT_IMPORT else "") for n, which in bad]
    return ", ".join(marks[:most]) + (f" and {len(marks) - most} more" if len(marks) > most else "")


def markdown(census: Census) -> str:
    """The census section's table and lists, for docs/lightning.md."""
    passing, total, current_passing, current, provided = census.shares()
    rows = [
        "| project | kind | names imported | gets past its imports? | refused at use | refused at use in its configs |",
        "|---|---|---|---|---|---|",
    ]
    for p in census.data["projects"]:
        where = f"{p['repo']}" + (f" `{p['under']}`" if p["under"] else "")
        link = f"[{where}](https://github.com/{p['repo']}/tree/{p['commit'][:10]}/{p['under']})"
        ok = "yes" if census.passes(p) else "no"
        marks = listed(census, p["names"])
        absent = {short(n) for n in p["names"] if census.verdict(n)[0] == ABSENT}
        if absent:
            marks += ("; " if marks else "") + f"{len(absent)} not in Lightning 2.6.6"
        rows.append(
            f"| {link} | {p['kind']} | {len(p['names'])} | {ok} | {marks} | {listed(census, p['configs'])} |"
        )
    refused = census.by_class(AT_USE) + census.by_class(AT_USE, "configs")
    reasons = [f"- `{n}` ({k}): {census.why(n, AT_USE)}" for n, k in refused.most_common(TOP)]
    if len(refused) > TOP:
        reasons.append(
            f"- and {len(refused) - TOP} more, each in one project (`census.py --check --failures`)."
        )
    absent = census.by_class(ABSENT)
    old = ", ".join(f"`{n}` ({k})" for n, k in absent.most_common(12))
    return "\n".join(
        [
            f"Every import gets past in **{passing} of {total}** projects; of the {current} whose imports all exist "
            f"in Lightning 2.6.6, in **{current_passing} of {current}**, and every name they import is provided "
            f"(none refused at use) in **{provided} of {current}**.",
            "",
            *rows,
            "",
            "Names that import and are refused when used, by the number of projects that import them (in code or "
            "configs), with surge's reason:",
            "",
            *reasons,
            "",
            f"Not in Lightning 2.6.6 either (old 1.x names; counted against neither): {old}"
            + (f", and {len(absent) - 12} more." if len(absent) > 12 else "."),
        ]
    )


BEGIN, END = "<!-- census: generated by tests/oracle/census.py --write-docs -->", "<!-- census end -->"


def write_docs(section: str) -> None:
    """Replace the generated part of docs/lightning.md's census section."""
    docs = HERE.parents[1] / "docs" / "lightning.md"
    text = docs.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    docs.write_text(f"{head}{BEGIN}\n{section}\n{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scan", type=Path, help="a checkout or bare git directory to add")
    parser.add_argument("--repo", help="owner/name of the scanned repository")
    parser.add_argument("--kind", help="what the project is (vision, nlp, rl, ...)")
    parser.add_argument("--under", default="", help="scan only this folder of it")
    parser.add_argument("--check", action="store_true", help="classify the committed names")
    parser.add_argument("--failures", action="store_true", help="with --check: every name, not the top 25")
    parser.add_argument("--markdown", action="store_true", help="print the docs section's table")
    parser.add_argument("--write-docs", action="store_true", help="put it into docs/lightning.md")
    args = parser.parse_args(argv)
    if args.scan:
        if not (args.repo and args.kind):
            parser.error("--scan needs --repo and --kind")
        project = scan(args.scan, args.repo, args.kind, args.under)
        save_project(project)
        print(
            f"{args.repo}: {project['files']} files, {len(project['names'])} names, {len(project['guarded'])} guarded"
        )
    if args.check or args.markdown or args.write_docs:
        census = Census.load()
        if args.write_docs:
            write_docs(markdown(census))
        else:
            print(markdown(census) if args.markdown else report(census, args.failures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
