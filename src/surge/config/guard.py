"""What a config may hold: YAML without alias bombs, and (opt-in) only class paths under allowed prefixes.

A config is code: a `class_path` names any importable callable and `init_args` are its arguments,
so building the config calls it. `ClassPathPolicy` is the opt-in allowlist behind
`--allow_class_paths`; `check_namespace` applies it to a parsed config before anything is built,
and the YAML loader registered here applies it to each file and flag value as it is read (before
jsonargparse imports anything it names: each `class_path`, and each dotted string naming a module,
which jsonargparse also resolves as a class path) and refuses YAML whose aliases expand past `MAX_YAML_NODES`.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from ..errors import MisconfigurationError

# surge's entry points: a config under an allowlist never names these, whatever it allows
NEVER_FROM_CONFIG = ("surge.cli", "surge.stage_cli", "surge.__main__", "surge.lightning.mode",
                     "surge.lightning.__main__", "surge.launch", "surge.launch.signals")  # fmt: skip
MAX_YAML_NODES = 100_000  # expanded values in one YAML document; real configs hold a few hundred
MAX_YAML_DEPTH = 100  # nested flow brackets; real configs use fewer than ten
YAML_MODE = "surge_yaml"  # the jsonargparse parser mode whose loader guards the YAML


class ConfigRefused(MisconfigurationError):
    """A config holds something surge will not load or build."""


class ClassPathPolicy:
    """The module prefixes a `class_path` may name: `torch.optim` allows `torch.optim.SGD`
    and `torch.optim.lr_scheduler.StepLR`, not `torch.optimx.Foo`."""

    def __init__(self, prefixes: Sequence[str]) -> None:
        if isinstance(prefixes, str):
            prefixes = split_prefixes(prefixes)
        for prefix in prefixes:
            if not isinstance(prefix, str) or not all(p.isidentifier() for p in prefix.split(".")):
                raise ConfigRefused(
                    f"allow_class_paths={list(prefixes)!r} is not valid: {prefix!r} is not a dotted "
                    "module prefix such as 'torch.optim' or 'mypkg'"
                )
        self.prefixes = tuple(prefixes)

    def allows(self, path: str) -> bool:
        return _under(path, self.prefixes) and not _under(path, NEVER_FROM_CONFIG)

    def check(self, path: str, where: str, source: str = "") -> None:
        """Refuse `path` (found at key `where`, in file `source`) unless it is allowed, and refuse
        an allowed path that re-exports an object defined outside the allowed prefixes."""
        defined = _defined_as(path)
        for name in (path, defined):
            if name is not None and not self.allows(name):
                alias = f" (that is {defined})" if name != path else ""
                place = " ".join(x for x in (where and f"at {where}", source and f"in {source}") if x)
                never = f" (never {', '.join(NEVER_FROM_CONFIG)}: they run scripts and processes)"
                raise ConfigRefused(
                    f"class_path {path!r}{alias} {place} is not allowed: allow_class_paths permits "
                    f"only {list(self.prefixes)}{never if _under(name, NEVER_FROM_CONFIG) else ''}. "
                    "Nothing was built. A config runs the code it names; add the module to "
                    "--allow_class_paths only if you trust this config"
                )

    def combine(self, other: ClassPathPolicy | None) -> ClassPathPolicy:
        """Both lists apply: a path must be under a prefix of each."""
        if other is None:
            return self
        kept = [p for p in self.prefixes if other.allows(p)] + [p for p in other.prefixes if self.allows(p)]
        return ClassPathPolicy(list(dict.fromkeys(kept)))


def _under(path: str, prefixes: Sequence[str]) -> bool:
    return any(path == p or path.startswith(p + ".") for p in prefixes)


def split_prefixes(text: str) -> list[str]:
    """`"torch.optim, mypkg"` -> `["torch.optim", "mypkg"]` (an empty string allows nothing)."""
    return [p.strip() for p in text.split(",") if p.strip()]


def _defined_as(path: str) -> str | None:
    """Where an already imported object named by `path` is defined (`module.qualname`), if known."""
    module, _, name = path.rpartition(".")
    obj = getattr(sys.modules.get(module), name, None)
    owner, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    return f"{owner}.{qualname}" if isinstance(owner, str) and isinstance(qualname, str) else None


def check_namespace(cfg: Any, policy: ClassPathPolicy, where: str = "") -> None:
    """Every `class_path` in a parsed config (a jsonargparse Namespace, nested) must be allowed."""
    for key, path in class_paths(cfg, where):
        policy.check(path, key)


def class_paths(value: Any, where: str) -> Iterator[tuple[str, str]]:
    """Each `(key, class_path)` in a config (dicts, Namespaces, lists), keys as `a.b[0].c`."""
    items = getattr(value, "__dict__", None) if type(value).__name__ == "Namespace" else None
    if isinstance(value, dict):
        items = value
    if items is not None:
        path = items.get("class_path")
        if isinstance(path, str):
            yield (where, path)
        for key, item in items.items():
            yield from class_paths(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from class_paths(item, f"{where}[{i}]")


# -- the YAML loader ---------------------------------------------------------------------------
_POLICY: ContextVar[ClassPathPolicy | None] = ContextVar("surge_class_path_policy", default=None)


@contextmanager
def applying(policy: ClassPathPolicy | None) -> Iterator[None]:
    """While parsing: every YAML document loaded is checked against `policy` as it is read."""
    token = _POLICY.set(policy)
    try:
        yield
    finally:
        _POLICY.reset(token)


def yaml_mode() -> str:
    """Register (once) the guarded YAML loader with jsonargparse; returns its parser mode."""
    import yaml
    from jsonargparse import get_loader, set_loader

    try:
        get_loader(YAML_MODE)
    except KeyError:
        set_loader(YAML_MODE, _load_yaml, exceptions=(yaml.YAMLError,))
    return YAML_MODE


def _load_yaml(text: str, path: str = "") -> Any:
    from jsonargparse import get_loader

    source = str(path) if path else "a YAML value (a flag's, or a nested config's)"
    check_yaml_size(text, source)
    value = get_loader("yaml")(text)
    policy = _POLICY.get()
    if policy is not None:
        for key, class_path in class_paths(value, ""):
            if "." in class_path:  # a bare class name resolves only to an imported subclass
                policy.check(class_path, key, source)
        for key, text in import_strings(value, ""):
            policy.check(text, key, source)
    return value


def check_yaml_size(text: str, source: str) -> None:
    """Refuse YAML nested or alias-expanded past any real config's size, before it is expanded
    (`source` names it in the message)."""
    import yaml

    if _too_deep(text):  # YAML parsers take time quadratic in the depth (and libyaml can crash)
        raise ConfigRefused(
            f"{source}: refused, its YAML nests brackets more than {MAX_YAML_DEPTH} deep (no real config does)"
        )
    try:
        for node in yaml.compose_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
            _check_size(node, source)
    except RecursionError:
        raise ConfigRefused(f"{source}: refused, its YAML is nested deeper than any real config") from None


def import_strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    """Each `(key, string)` in a loaded config value whose resolution by jsonargparse would import
    a module: the string form of a class path (`model: pkg.Model`, `callbacks: [pkg.Cb]`,
    `optimizer: pkg.Opt`). A `class_path` value is checked apart."""
    if isinstance(value, str):
        if _would_import(value):
            yield (where, value)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key != "class_path":
                yield from import_strings(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from import_strings(item, f"{where}[{i}]")


def _would_import(text: str) -> bool:
    """Whether resolving `text` as `module.name` would import a module: it is a dotted name, `name`
    is not already in the imported `module`, and its top-level module can be found (found, not
    imported: finding a top-level module runs none of its code). `last.ckpt` names no module, and
    `torch.tanh` (a default's text, once torch is imported) imports nothing."""
    import importlib.util

    parts = text.split(".")
    if len(parts) < 2 or not all(p.isidentifier() for p in parts):
        return False
    module = sys.modules.get(".".join(parts[:-1]))
    if module is not None and parts[-1] in getattr(module, "__dict__", {}):
        return False
    try:
        return parts[0] in sys.modules or importlib.util.find_spec(parts[0]) is not None
    except (ImportError, ValueError):
        return False


def _too_deep(text: str) -> bool:
    """Whether `[`/`{` nest deeper than `MAX_YAML_DEPTH` (brackets inside strings count too)."""
    depth = 0
    for match in re.finditer(r"[\[\]{}]", text):
        depth += 1 if match.group() in "[{" else -1
        if depth > MAX_YAML_DEPTH:
            return True
    return False


def _check_size(node: Any, source: str) -> None:
    size = _expanded_size(node, {})
    if size < 0:
        raise ConfigRefused(
            f"{source}: refused, a YAML alias sits inside its own anchor (it expands without end)"
        )
    if size > MAX_YAML_NODES:
        raise ConfigRefused(
            f"{source}: refused, its YAML aliases expand to more than {MAX_YAML_NODES} values (an alias "
            "bomb, or a config far larger than any real one); it was not expanded"
        )


def _expanded_size(node: Any, seen: dict[int, int]) -> int:
    """The number of values `node` becomes once every alias is expanded (-1: without end), in time
    linear in the composed graph: an alias is the same node object as its anchor, counted once."""
    if id(node) in seen:
        return seen[id(node)]
    seen[id(node)] = -1  # until counted: meeting it again means an alias inside its own anchor
    size = 1
    if isinstance(node.value, list):
        for item in node.value:
            for child in item if isinstance(item, tuple) else (item,):
                child_size = _expanded_size(child, seen)
                if child_size < 0:
                    return -1
                size += child_size
            if size > MAX_YAML_NODES:
                break
    seen[id(node)] = size
    return size
