"""What a command line or config that does not parse says: the guard's refusal where jsonargparse
wrapped one, else jsonargparse's message with the closest known key for one the command does not
know (the one way, `errors.did_you_mean`, applied to the key jsonargparse names)."""

from __future__ import annotations

import inspect
import re
import sys
from typing import Any

from ..config import guard as config_guard
from ..errors import did_you_mean


def parse_error(err: BaseException, parser: Any) -> str:
    """The message for jsonargparse's `err` from the command's `parser`."""
    refused = _refusal(err)
    return str(refused) if refused is not None else key_hint(str(err), parser)


def key_hint(message: str, parser: Any) -> str:
    """jsonargparse's message for an unknown option or config key, with the closest key the command
    knows (`trainer.max_epoch` -> `trainer.max_epochs`); an init_args key a class_path does not take,
    found inside its Union text, is said first, with the closest of that class's parameters."""
    init_arg = re.search(r"class_path '([\w.]+)':\s*Option '(\w+)' is not accepted", message)
    if init_arg is not None:
        section = re.match(r'Parser key "([\w.]+)"', message)
        where = f"{section.group(1)}: " if section else ""
        path, key = init_arg.groups()
        hint = did_you_mean(key, _parameters(path))
        return f"{where}{path} takes no init_args key {key!r}{hint}.\n{message}"
    found = re.search(r"option '([\w.]+)'|unrecognized arguments: --([\w.]+)", message, re.IGNORECASE)
    if found is None or parser is None:
        return message
    known = [opt[2:] for opt in getattr(parser, "_option_string_actions", {}) if opt.startswith("--")]
    return message + did_you_mean(found.group(1) or found.group(2), known)


def _parameters(class_path: str) -> list[str]:
    """The parameters of an already imported class (nothing is imported here: the guard decides that)."""
    module, _, name = class_path.rpartition(".")
    cls = getattr(sys.modules.get(module), name, None)
    if cls is None:
        return []
    try:
        return list(inspect.signature(cls).parameters)
    except (TypeError, ValueError):
        return []


def _refusal(err: BaseException | None) -> config_guard.ConfigRefused | None:
    """The guard's refusal, if jsonargparse wrapped one into its own error."""
    while err is not None:
        if isinstance(err, config_guard.ConfigRefused):
            return err
        err = err.__cause__ or err.__context__
    return None


def command_error(prog: str | None, command: str | None, message: str) -> str:
    """How a refused command line or config is shown: one message, then where to look."""
    where = " ".join(p for p in (prog or "surge", command) if p)
    hint = f"\n(`{where} --help` lists the options; `--print_config` shows the merged config)\n"
    return f"{where}: error: {message.strip()}{hint}"
