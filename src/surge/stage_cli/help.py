"""`surge fit --help` that reads like docs/trainer.md: the Trainer's options in its groups, each with
its meaning (config/meanings.py), a short usage line, and only public classes offered as choices.

Imported by the config commands once jsonargparse is known to be installed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from jsonargparse import DefaultHelpFormatter

from ..config.meanings import GROUPS

SECTION = "trainer"
KNOWN = ", known subclasses: "  # how jsonargparse lists the classes a value may name


class HelpFormatter(DefaultHelpFormatter):
    """jsonargparse's formatter, with one usage entry for every `--trainer.NAME` and the classes
    offered for a value limited to public ones (not surge's, or exported by `surge` or by their
    top-level surge package: `surge.callbacks.ModelCheckpoint`, not the Trainer's own helpers)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = super()._get_help_string(action)
        head, known, tail = text.rpartition(KNOWN)
        if not known or not tail.endswith(")"):
            return text
        public = [path for path in tail[:-1].split(", ") if _public(path)]
        return f"{head}{KNOWN}{', '.join(public)})" if public else f"{head})"

    def _format_usage(self, usage: Any, actions: Any, groups: Any, prefix: Any) -> str:
        shown, folded = [], False
        for action in actions:
            if _option_name(action) is None:
                shown.append(action)
            elif not folded:  # the first Trainer option stands for all of them
                shown.append(argparse.Action([f"--{SECTION}.NAME"], dest=f"{SECTION}_name", metavar="VALUE"))
                folded = True
        return super()._format_usage(usage, shown, groups, prefix)


def group_trainer_options(parser: Any) -> None:
    """Move the `--trainer.NAME` options into one argument group per meanings group, in its order,
    each with its meaning as its help. Help only: parsing does not read the groups."""
    section = parser.groups[SECTION]  # jsonargparse's group, titled by the Trainer's summary: left empty
    head = parser.add_argument_group("Trainer", "surge.Trainer's arguments, grouped as in docs/trainer.md.")
    options: dict[str, list[argparse.Action]] = {}
    for action in list(section._group_actions):
        name = _option_name(action)
        if name is not None:
            options.setdefault(name, []).append(action)
        else:  # `--trainer CONFIG`
            section._group_actions.remove(action)
            head._group_actions.append(action)
    for title, arguments in GROUPS:
        group = parser.add_argument_group(f"Trainer: {title.lower()}")
        for name, meaning in arguments.items():
            for action in options.get(name, []):
                section._group_actions.remove(action)
                group._group_actions.append(action)
                if not action.option_strings[0].endswith(".help"):
                    action.help = meaning


def _option_name(action: argparse.Action) -> str | None:
    """`NAME` for the action of `--trainer.NAME` (or of its `--trainer.NAME.help`), else None."""
    prefix = f"--{SECTION}."
    if not action.option_strings or not action.option_strings[0].startswith(prefix):
        return None
    return action.option_strings[0][len(prefix) :].removesuffix(".help")


def _public(path: str) -> bool:
    """A class path a user would write: not surge's, or exported by `surge` or by the top-level
    surge package or module it is in (`surge.callbacks`, `surge.demo`, ...)."""
    parts = path.split(".")
    if parts[0] != "surge":
        return True
    top = sys.modules.get(".".join(parts[:2]))
    return any(parts[-1] in getattr(m, "__all__", ()) for m in (sys.modules.get("surge"), top))
