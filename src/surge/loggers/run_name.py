"""The default name of a logger's run directory (`save_dir/<name>/version_N`): `surge_logs`, or
Lightning's `lightning_logs` while a script runs in Lightning mode (`surge run`, `surge.config.semantics`),
where Lightning's layout is the promise. The default is a plain string, so configs print and parse it;
in Lightning mode the name `surge_logs` stands for the default."""

from __future__ import annotations

from ..config import semantics

DEFAULT_NAME = "surge_logs"


def run_name(name: str | None) -> str:
    """`name` as given (`None` or "" : directly in save_dir, as Lightning), or the mode's default."""
    if name == DEFAULT_NAME and semantics.lightning():
        return "lightning_logs"
    return name or ""
