"""The default name of a logger's run directory (`save_dir/<name>/version_N`): `surge_logs`, or
Lightning's `lightning_logs` while a script runs in Lightning mode (`surge run`, whose finder is on
`sys.meta_path`: `surge.semantics`), where Lightning's layout is the promise."""

from __future__ import annotations

from .. import semantics


class DefaultName(str):
    """The `name` a logger gets when none is passed: resolved when the logger is built."""

    def resolve(self) -> str:
        return "lightning_logs" if semantics.lightning() else str(self)


DEFAULT_NAME = DefaultName("surge_logs")


def run_name(name: str | None) -> str:
    """`name` as given (`None` or "" : directly in save_dir, as Lightning), or the mode's default."""
    if isinstance(name, DefaultName):
        return name.resolve()
    return name or ""
