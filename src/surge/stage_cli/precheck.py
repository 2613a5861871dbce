"""A config's mistakes found before torch loads. `surge fit --config run.yaml` reads its files and
flags first, and refuses in a fraction of a second what would otherwise surface after torch's
import: a file that is missing or not YAML, a section or a Trainer argument that does not exist
(with the closest name), a section that is not a mapping, and a class_path whose top-level package
cannot be found. Nothing here imports the code a config names (finding a package runs none of it);
what needs the classes themselves (types, init_args) is checked by jsonargparse afterwards, so this
pass only refuses what that parse would refuse too, or would silently ignore."""

from __future__ import annotations

import functools
import importlib.util
import os
import re
from collections.abc import Iterator, Sequence
from typing import Any

from ..config import guard as config_guard
from ..config.meanings import names as trainer_arguments
from ..errors import did_you_mean

_OWN_FLAGS = ("config", "print_config", "help", "allow_class_paths")
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")
# jsonargparse's own keys, which a config may hold (a dumped config keeps `__path__`)
_META_KEYS = ("__path__", "__default_config__", "__orig__", "__subclasses_disabled__")


def sections(command: str) -> tuple[str, ...]:
    """The top-level keys of a `surge COMMAND` config (the parser's own, as stage_cli/config.py adds them)."""
    return ("model", "data", "trainer", "ckpt_path", "seed_everything") + (
        ("predictions_path",) if command == "predict" else ()
    )


def config_mistake(command: str, args: Sequence[str]) -> str | None:
    """The first mistake found in `surge COMMAND ARGS`'s config files and flags, as a message naming
    the place and the fix; None when none is found here (or when `--help` asks for help)."""
    if "-h" in args or "--help" in args:
        return None
    try:
        for source, config in _configs(args):
            found = _config_mistake(command, config, source)
            if found is not None:
                return found
    except _Unreadable as err:
        return str(err)
    return _flag_mistake(command, args)


class _Unreadable(Exception):
    """A --config value that gives no config to check; the message names it and the fix."""


def _configs(args: Sequence[str]) -> Iterator[tuple[str, Any]]:
    """`(source, loaded config)` for each `--config` value, in order (_Unreadable for one that is not)."""
    if args and args[-1] == "--config":
        raise _Unreadable("--config needs a value: a config file, e.g. --config run.yaml")
    for value in _flag_values(args, "config"):
        if not value:
            raise _Unreadable("--config needs a value: a config file, e.g. --config=run.yaml")
        path = os.path.expanduser(value)  # jsonargparse expands `~`, as a shell would
        if os.path.isdir(path):
            raise _Unreadable(f"--config {value}: a folder, not a config file")
        if os.path.exists(path) and not os.path.isfile(path):
            continue  # a pipe (`--config <(...)`, /dev/stdin) can be read once: by the full parse
        try:
            if os.path.isfile(path):
                source, text = value, _read(path, value)
            else:  # jsonargparse also takes the config's text itself
                source, text = "the --config text", value
            config = _load(text, source)
        except ValueError as err:
            raise _Unreadable(str(err)) from None
        if source != value and not isinstance(config, dict):
            raise _Unreadable(
                f"--config {value}: no such file (in {os.getcwd()}), nor a config written inline"
            )
        yield source, config


def _read(path: str, value: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except UnicodeDecodeError as err:
        raise ValueError(
            f"--config {value}: not UTF-8 text ({err.reason} at byte {err.start}); save it as UTF-8"
        ) from None
    except OSError as err:
        raise ValueError(f"--config {value}: cannot be read ({err})") from None


def _load(text: str, source: str) -> Any:
    import yaml

    try:
        config_guard.check_yaml_size(text, source)
        return yaml.load(text, Loader=_loader())
    except config_guard.ConfigRefused:
        raise
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ValueError(f"{source}: not valid YAML{where}: {err.problem}") from None
    except (yaml.YAMLError, ValueError, TypeError) as err:  # such as `!!float abc`
        raise ValueError(f"{source}: not valid YAML: {err}") from None


@functools.cache
def _loader() -> type:
    """PyYAML's safe loader as jsonargparse's reads a config: with no timestamps, so that
    `2024-13-01` stays text (PyYAML's own would refuse it as a date)."""
    import yaml

    base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    resolvers = {
        first: [(tag, regexp) for tag, regexp in found if tag != "tag:yaml.org,2002:timestamp"]
        for first, found in base.yaml_implicit_resolvers.items()
    }
    return type("ConfigLoader", (base,), {"yaml_implicit_resolvers": resolvers})


def _config_mistake(command: str, config: Any, source: str) -> str | None:
    known = sections(command)
    if config is None:  # the full parse takes an empty file for inline text, and refuses it
        return f"{source}: holds no config (it is empty); write its sections ({', '.join(known)}) or leave it out"
    if not isinstance(config, dict):
        return (
            f"{source}: a config is a mapping of sections ({', '.join(known)}), not a {type(config).__name__}"
        )
    trainer = config.get("trainer")
    if trainer is not None and not isinstance(trainer, dict):
        return (
            f"{source}: trainer must be a mapping of Trainer arguments, e.g. `trainer: {{max_epochs: 5}}`, "
            f"not a {type(trainer).__name__} ({trainer!r})"
        )
    # A key may be dotted, as a flag is (`trainer.max_epochs: 5`; in trainer, `logger.init_args.save_dir`
    # is the logger's); `config: other.yaml` is read in its place (and not checked here).
    names = [str(key) for key in config if key != "config"] + [f"trainer.{key}" for key in trainer or {}]
    for name in names:
        found = _name_mistake(command, name, source)
        if found is not None:
            return found
    paths = [(f"{where}.class_path", path) for where, path in config_guard.class_paths(config, "")]
    for where, path in [*paths, *_short_forms(config, source)]:
        found = _missing_package(path, f"{source}: {where}")
        if found is not None:
            return found
    return None


def _short_forms(config: dict[Any, Any], source: str) -> Iterator[tuple[str, str]]:
    """`model: pkg.Net` (and `data:`), a class_path written alone; not a subclass's config file,
    which jsonargparse finds beside the config that names it."""
    folder = os.path.dirname(os.path.expanduser(source)) if os.path.isfile(os.path.expanduser(source)) else ""
    for key in ("model", "data"):
        value = config.get(key)
        if not isinstance(value, str) or not _DOTTED.fullmatch(value):
            continue
        if not os.path.isfile(os.path.join(folder, value)) and not os.path.isfile(value):
            yield key, value


def _flag_mistake(command: str, args: Sequence[str]) -> str | None:
    for i, arg in enumerate(args):
        if not arg.startswith("--") or arg == "--":
            continue
        name, _, inline = arg[2:].partition("=")
        if name.split(".")[0] in _OWN_FLAGS:
            continue
        found = _name_mistake(command, name, f"--{name}")
        value = inline if "=" in arg else (args[i + 1] if i + 1 < len(args) else "")
        names_class = name in ("model", "data") or name.endswith(".class_path")
        # `--model model.yaml` names a file holding the class_path, not a module
        if found is None and names_class and _DOTTED.fullmatch(value) and not os.path.isfile(value):
            found = _missing_package(value, f"--{name}")
        if found is not None:
            return found
    return None


def _name_mistake(command: str, name: str, where: str) -> str | None:
    """A dotted key (`trainer.max_epochs`, `model.init_args.lr`, as a flag or a config key) that
    names no section, or no Trainer argument, of `surge COMMAND`."""
    parts = [p.rstrip("+") for p in name.split(".")]
    if any(part in _META_KEYS for part in parts):
        return None
    if parts[0] not in sections(command):
        return _unknown_section(command, name, where)
    if parts[0] == "trainer" and len(parts) > 1 and parts[1] not in (*trainer_arguments(), "help"):
        return _unknown_argument(parts[1], where)
    return None


def _unknown_section(command: str, key: str, where: str) -> str:
    known, key = sections(command), key.split(".")[0]
    if where.startswith("--"):  # a flag
        hint = did_you_mean(f"--{key}", [f"--{k}" for k in known + _OWN_FLAGS])
        return f"{where}: `surge {command}` has no option --{key}{hint}"
    hint = did_you_mean(key, known)
    return f"{where}: {key!r} is not a section of a `surge {command}` config{hint}; the sections are {', '.join(known)}"


def _unknown_argument(key: str, where: str) -> str:
    return f"{where}: {key!r} is not a Trainer argument{did_you_mean(key, trainer_arguments())}"


def _missing_package(path: Any, where: str) -> str | None:
    """A message when the top-level package of the dotted `path` cannot be found (a bare class name
    names a subclass already imported, and is jsonargparse's to resolve)."""
    if not isinstance(path, str) or "." not in path:
        return None
    top = path.split(".")[0]
    try:
        if importlib.util.find_spec(top) is not None:
            return None
    except (ImportError, ValueError):
        return None
    if top in ("lightning", "pytorch_lightning"):  # mapped onto surge only under `surge run`
        return (
            f"{where} {path!r}: Lightning is not installed, and a `surge` config names surge's classes: "
            "Lightning's are under surge.lightning (e.g. surge.lightning.callbacks.EarlyStopping for "
            "lightning.pytorch.callbacks.EarlyStopping)"
        )
    if path.rsplit(".", 1)[1] in ("yaml", "yml", "json"):  # `--model model.yaml`: a file, meant
        return (
            f"{where} {path!r}: no such file in the current directory ({os.getcwd()}), nor a module {top!r}"
        )
    return (
        f"{where} {path!r}: no module named {top!r} is installed or in the current directory "
        f"({os.getcwd()}); check the spelling, or run from the folder that holds {top}.py"
    )


def _flag_values(args: Sequence[str], flag: str) -> Iterator[str]:
    for i, arg in enumerate(args):
        if arg == f"--{flag}" and i + 1 < len(args):
            yield args[i + 1]
        elif arg.startswith(f"--{flag}="):
            yield arg.split("=", 1)[1]
