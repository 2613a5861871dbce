"""Pictures of a run: its logged curves (`surge plot RUN_DIR`) and the doctor's phase chart.

matplotlib is optional (`pip install -e ".[plot]"`) and imported only here, with the Agg backend.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import MisconfigurationError, install_hint


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as err:
        raise ImportError(f"plotting needs matplotlib: {install_hint('plot')}") from err
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def read_metrics(run_dir: str | Path) -> tuple[list[dict[str, float]], list[str]]:
    """The rows of a run's `metrics.csv` (CSVLogger) as floats, and the metric names."""
    path = Path(run_dir)
    path = path if path.name == "metrics.csv" and path.is_file() else path / "metrics.csv"  # either
    if not path.is_file():
        raise MisconfigurationError(
            f"{run_dir} has no metrics.csv: pass a run directory written by surge's CSVLogger "
            "(e.g. surge_logs/version_0)"
        )
    with open(path, newline="") as f:
        rows = [{k: float(v) for k, v in row.items() if v not in ("", None)} for row in csv.DictReader(f)]
    names = sorted({k for row in rows for k in row} - {"step", "epoch"})
    if not names:
        raise MisconfigurationError(f"{path} holds no logged metrics to plot")
    return rows, names


_STAGES = ("train_", "val_", "test_")


def panels(names: Sequence[str]) -> dict[str, list[str]]:
    """The panels of `surge plot`: one per quantity (`train_loss`, `val_loss` and `loss_epoch` are
    `loss`), by its name, each listing train, then validation, then test, then the rest, so two
    runs that log the same names draw the same picture whatever the order of their columns."""
    groups: dict[str, list[str]] = {}
    for name in names:
        base = name.removesuffix("_step").removesuffix("_epoch")
        for prefix in _STAGES:
            base = base.removeprefix(prefix)
        groups.setdefault(base, []).append(name)

    def stage(name: str) -> tuple[int, str]:
        return next((i for i, p in enumerate(_STAGES) if name.startswith(p)), len(_STAGES)), name

    return {base: sorted(groups[base], key=stage) for base in sorted(groups)}


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Every logged metric of a run against the step (and epoch-level ones against the epoch),
    one panel each, train and validation of a quantity side by side; returns the PNG's path."""
    rows, names = read_metrics(run_dir)
    names = [n for n in names if not n.startswith("goodput/")] or names  # one value at the end: the table
    plt = _pyplot()
    groups = panels(names)
    cols = min(3, len(groups))
    nrows = math.ceil(len(groups) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 3.4 * nrows), squeeze=False)
    for ax, (base, members) in zip(axes.flat, groups.items()):
        for name in members:
            points = [(r["step"], r[name]) for r in rows if name in r and "step" in r]
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3, label=name)
        ax.set_title(base)
        ax.set_xlabel("step")
        ax.legend(fontsize=8)
        _epoch_axis(ax, rows)
    for ax in list(axes.flat)[len(groups) :]:
        ax.set_visible(False)
    fig.tight_layout()
    folder = Path(run_dir).parent if Path(run_dir).name == "metrics.csv" else Path(run_dir)
    out = Path(out) if out is not None else folder / "curves.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _epoch_axis(ax: Any, rows: list[dict[str, float]]) -> None:
    """A secondary x axis in epochs, when the rows say which step began which epoch."""
    firsts: dict[int, float] = {}
    stepwise = [r for r in rows if any(k.endswith("_step") for k in r)] or rows  # rows logged inside epochs
    for r in stepwise:
        if "epoch" in r and "step" in r:
            firsts.setdefault(int(r["epoch"]), r["step"])
    if len(firsts) < 2:
        return
    top = ax.secondary_xaxis("top")
    top.set_xticks(list(firsts.values()))
    top.set_xticklabels([str(e) for e in firsts])
    top.set_xlabel("epoch", fontsize=8)


def plot_phases(steps: Sequence[Any], out: str | Path) -> Path:
    """The doctor's chart: each step's time stacked by phase (milliseconds), over the steps."""
    from .timing import PHASES

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 3.6))
    xs = list(range(len(steps)))
    bottom = [0.0] * len(steps)
    for phase in (*PHASES, "other"):
        if phase == "other":
            ys = [max(0.0, s.total - sum(s.phases.values())) * 1e3 for s in steps]
        else:
            ys = [s.phases.get(phase, 0.0) * 1e3 for s in steps]
        if any(ys):
            ax.bar(xs, ys, bottom=bottom, width=1.0, label=phase)
            bottom = [b + y for b, y in zip(bottom, ys)]
    ax.set_xlabel("training step")
    ax.set_ylabel("ms")
    ax.set_title("where each step's time goes")
    ax.legend(fontsize=8, ncol=4)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return Path(out)
