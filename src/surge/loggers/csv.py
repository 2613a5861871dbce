"""`CSVLogger`: metrics.csv and hparams.yaml in a versioned run directory (the default logger)."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..rank_zero import warn
from .base import PLAIN_NUMBERS, Logger, RunDir, no_prefix, read_now
from .files import WriteFailures, append_whole, hparams_yaml, write_atomic
from .run_name import DEFAULT_NAME, run_name


class CSVLogger(Logger):
    """Writes one row per `log_metrics` call to `save_dir/name/version_N/metrics.csv`, Lightning's
    layout: the columns sorted by name (`step` among them; surge's own `goodput/` values last), a cell left empty where a row has no
    value, so the step values and the epoch values logged at one step are two rows.

    Rows are buffered and appended on `save()` (at most every `flush_every` rows); when a new metric
    name appears the file is replaced, atomically, by one with the wider header. A write that fails
    (a full disk) is reported once and training goes on: the rows stay buffered and are written by a
    later `save()`.
    """

    def __init__(
        self,
        save_dir: str | Path = ".",
        name: str | None = DEFAULT_NAME,
        version: int | str | None = None,
        flush_every: int = 100,
        prefix: str = "",
        flush_logs_every_n_steps: int | None = None,
    ) -> None:
        no_prefix("CSVLogger", prefix)  # Lightning's arguments: prefix only empty; its name for flush_every
        if flush_logs_every_n_steps is not None:
            flush_every = flush_logs_every_n_steps
        self._run = RunDir(save_dir, run_name(name), version)
        self._rows: list[dict[str, Any]] = []
        self._columns: list[str] = []  # the header of metrics.csv as written
        self._size: int | None = None  # bytes of metrics.csv known whole; None before the first write
        self._hparams: bytes | None = None  # hparams.yaml still to write
        self._flush_every = flush_every
        self._flush_at = flush_every
        self._failures = WriteFailures("CSVLogger")
        self._drop_from: int | None = None  # a resumed run: rows from its checkpoint's step on are replaced

    @property
    def name(self) -> str:
        return self._run.name

    @property
    def version(self) -> int | str | None:
        return self._run.version

    @property
    def log_dir(self) -> str:
        return self._run.log_dir

    @property
    def save_dir(self) -> str:
        return self._run.save_dir

    @property
    def root_dir(self) -> str:
        return self._run.root_dir

    @property
    def metrics_path(self) -> Path:
        return self._run.path / "metrics.csv"

    def run_state(self) -> dict[str, Any] | None:
        return self._run.run_state()

    def resume_run(self, state: Mapping[str, Any], step: int) -> None:
        if "version" in state and self._run.adopt(state["version"], "CSVLogger"):
            self._drop_from = step

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        row = {**metrics, "step": step}
        for k, v in metrics.items():  # a tensor is read now, not written as "tensor(...)" at a flush
            if v.__class__ not in PLAIN_NUMBERS:
                row[k] = read_now(v)
        self._rows.append(row)
        if len(self._rows) >= self._flush_at:
            self.save()

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        self._hparams = hparams_yaml(params)
        self.save()

    def save(self) -> None:
        path = self._run.where
        try:
            if self._hparams is not None:
                path = self._run.path / "hparams.yaml"
                write_atomic(path, self._hparams)
                self._hparams = None
            path = self.metrics_path
            self._write_rows(path)
        except OSError as err:
            self._flush_at = len(self._rows) + self._flush_every  # not on every call while it fails
            self._failures.failed(path, err, "the metrics are kept in memory and written when it can")
            return
        self._flush_at = self._flush_every
        self._failures.recovered(path)

    def finalize(self, status: str) -> None:
        self.save()
        if self._rows or self._hparams is not None:
            warn(
                f"CSVLogger could not write {len(self._rows)} metric rows"
                f"{' and hparams.yaml' if self._hparams is not None else ''} to {self._run.where} "
                f"at the end of the run ({self._failures.error}); they are lost."
            )

    def _write_rows(self, path: Path) -> None:
        if not self._rows:
            return
        new = [k for row in self._rows for k in row if k not in self._columns]
        if new or self._size is None or not path.exists():
            self._rewrite(path)
        else:
            self._size = append_whole(path, _encode(self._columns, self._rows, header=False), self._size)
        self._rows = []

    def _rewrite(self, path: Path) -> None:
        """Replace metrics.csv by one with the rows written so far, the buffered rows and a header
        wide enough for all of them."""
        header, old = self._written(path)
        if self._drop_from is not None:  # the resumed run writes these steps again
            old = [row for row in old if _step(row) < self._drop_from]
            self._drop_from = None
        columns = sorted({*header, *self._columns, *(k for r in self._rows for k in r)}, key=_column_order)
        data = _encode(columns, old + self._rows, header=True)
        write_atomic(path, data)
        self._columns, self._size = columns, len(data)

    def _written(self, path: Path) -> tuple[list[str], list[dict[str, Any]]]:
        """The header and rows already in metrics.csv (only its whole part, if a tail was torn)."""
        if not path.exists():
            return [], []
        with open(path, "rb") as f:
            data = f.read() if self._size is None else f.read(self._size)
        reader = csv.DictReader(io.StringIO(data.decode(), newline=""))
        rows = [{k: v for k, v in row.items() if k is not None} for row in reader]  # no cells past the header
        return list(reader.fieldnames or []), rows


def _step(row: Mapping[str, Any]) -> float:
    try:
        return float(row.get("step") or 0)
    except ValueError:
        return 0.0


def _column_order(name: str) -> tuple[bool, str]:
    """By name, as Lightning's; surge's own `goodput/` values after the user's columns."""
    return name.startswith("goodput/"), name


def _encode(columns: list[str], rows: list[dict[str, Any]], header: bool) -> bytes:
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=columns)
    if header:
        writer.writeheader()
    writer.writerows(rows)
    return out.getvalue().encode()
