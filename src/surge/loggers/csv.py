"""`CSVLogger`: metrics.csv and hparams.yaml in a versioned run directory (the default logger)."""

from __future__ import annotations

import csv
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..hparams import plain
from .base import Logger, RunDir


class CSVLogger(Logger):
    """Writes one row per logging call to `save_dir/name/version_N/metrics.csv`.

    Calls at the same step with different metric names share a row. Rows are buffered and appended on `save()` (at most every `flush_every` rows); when a new
    metric name appears the file is rewritten with the wider header.
    """

    def __init__(
        self,
        save_dir: str | Path = ".",
        name: str = "surge_logs",
        version: int | str | None = None,
        flush_every: int = 100,
    ) -> None:
        self._run = RunDir(save_dir, name, version)
        self._rows: list[dict[str, Any]] = []
        self._columns: list[str] = []
        self._flush_every = flush_every

    @property
    def name(self) -> str:
        return self._run.name

    @property
    def version(self) -> int | str | None:
        return self._run.version

    @property
    def log_dir(self) -> Path:
        return self._run.path

    @property
    def metrics_path(self) -> Path:
        return self.log_dir / "metrics.csv"

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        if (
            self._rows
            and self._rows[-1]["step"] == step
            and not (set(metrics) - {"epoch"}) & set(self._rows[-1])
        ):
            self._rows[-1].update(metrics)  # one row per step
        else:
            self._rows.append({"step": step, **metrics})
        if len(self._rows) >= self._flush_every:
            self.save()

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        import yaml

        with open(self.log_dir / "hparams.yaml", "w") as f:
            yaml.safe_dump(plain(dict(params)), f, sort_keys=False)

    def save(self) -> None:
        if not self._rows:
            return
        new = [k for row in self._rows for k in row if k not in self._columns]
        path = self.metrics_path
        if new or not path.exists():
            old_rows: list[dict[str, Any]] = []
            if path.exists():
                with open(path, newline="") as f:
                    old_rows = list(csv.DictReader(f))
            self._columns += list(dict.fromkeys(new))
            with open(path, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=self._columns)
                writer.writeheader()
                writer.writerows(old_rows + self._rows)
        else:
            with open(path, "a", newline="") as f:
                csv.DictWriter(f, fieldnames=self._columns).writerows(self._rows)
        self._rows = []
