"""The table `trainer.validate()`/`trainer.test()` print (`verbose=True`), in Lightning's layout:
a bar the terminal's width, a header row ("Test metric", "DataLoader 0", ...), one row per metric
name (sorted, the `/dataloader_idx_N` suffix dropped), the values centred in columns of equal
width, and another bar. Loaders that do not fit the width go into further tables."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Mapping, Sequence

from ..rank_zero import global_rank, show


def results_table(results: Sequence[Mapping[str, float]], stage: str, columns: int | None = None) -> str:
    """The table for `results` (one dict per loader) of `stage` ("validate", "test"); "" when empty."""
    width = _width(columns)
    bar = _bar_character() * width
    tables = []
    for head, rows, cell in _tables(results, stage, width):
        lines = [bar, _row(head, cell), bar]
        for name, *values in rows:
            lines += _metric_rows(name, values, cell, int(width / 2))
        lines.append(bar)
        tables.append("\n".join(lines))
    return "\n".join(tables)


def _width(columns: int | None) -> int:
    return columns or shutil.get_terminal_size(fallback=(120, 30)).columns or 120


def _tables(
    results: Sequence[Mapping[str, float]], stage: str, width: int
) -> list[tuple[list[str], list[list[str]], int]]:
    """Each table's header, its rows (a metric's name, then its value per loader) and the cell width."""
    per_loader = [{name.split("/dataloader_idx_")[0]: v for name, v in r.items()} for r in results]
    names = sorted({name for r in per_loader for name in r})
    if not names:
        return []
    headers = [f"DataLoader {i}" for i in range(len(per_loader))]
    cell = int(min(max(max(map(len, names)), max(map(len, headers)), 25), width / 2))
    per_table = max(1, int((width - cell) / cell))
    out = []
    for start in range(0, len(headers), per_table):
        loaders = per_loader[start : start + per_table]
        head = [f"{stage} metric".capitalize(), *headers[start : start + per_table]]
        rows = [[name, *(str(r[name]) if name in r else " " for r in loaders)] for name in names]
        out.append((head, rows, cell))
    return out


def _rich_tables(results: Sequence[Mapping[str, float]], stage: str) -> bool:
    """Print the tables with rich, as Lightning does when rich (>= 10.2.2) is installed; False without it."""
    try:
        from rich import get_console
        from rich.table import Column, Table
    except ImportError:
        return False
    for head, rows, cell in _tables(results, stage, _width(None)):
        styles = ["cyan", *["magenta"] * (len(head) - 1)]  # the metric names, then the values
        columns = [Column(h, justify="center", style=s, width=cell) for h, s in zip(head, styles)]
        table = Table(*columns)
        for row in rows:
            table.add_row(*row)
        get_console().print(table)
    return True


def _metric_rows(name: str, values: list[str], cell: int, wrap: int) -> list[str]:
    """A metric's row; a name longer than half the width is cut into pieces, the values beside the first."""
    if len(name) <= wrap:
        return [_row([name, *values], cell)]
    rows = []
    while len(name) > wrap:
        rows.append(_row([name[:wrap], *values], cell))
        name = name[wrap:]
    return [*rows, _row([name, " "], cell)]


def _row(cells: Sequence[str], cell: int) -> str:
    return "".join(f"{c:^{cell}}" for c in cells).rstrip()


def _bar_character() -> str:
    try:
        "─".encode(sys.stdout.encoding or "utf-8")
    except UnicodeEncodeError:
        return "-"
    return "─"


def print_results(results: Sequence[Mapping[str, float]], stage: str) -> None:
    """Print the table on rank zero (nothing when no metric was logged): with rich's box table
    when rich is installed, else in plain text, as Lightning prints it."""
    if global_rank() != 0:
        return
    if _rich_tables(results, stage):
        return
    table = results_table(results, stage)
    if table:
        show(table)
