"""The default name of a logger's run directory (`save_dir/<name>/version_N`): `surge_logs`, or
Lightning's `lightning_logs` while a script runs in Lightning mode (`surge run`,
`Semantics.default_logger_name`), where Lightning's layout is the promise. The default is a plain
string, so configs print and parse it; in Lightning mode the name `surge_logs` stands for the default.

A script builds its loggers before any Trainer exists, and a logger's directory can be asked for
then, so this is the one part that reads the mode itself (`Semantics.current()`), when the logger is
built, rather than from the Trainer."""

from __future__ import annotations

from ..config.semantics import Semantics

DEFAULT_NAME = "surge_logs"


def run_name(name: str | None) -> str:
    """`name` as given (`None` or "" : directly in save_dir, as Lightning), or the mode's default."""
    if name == DEFAULT_NAME:
        return Semantics.current().default_logger_name
    return name or ""
