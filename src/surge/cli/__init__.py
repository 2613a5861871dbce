"""The `surge` command (also `python -m surge`): `fit`/`validate`/`test`/`predict` from a config
(`src/surge/stage_cli/config.py`), `run` (a Lightning script, unmodified), `demo`, `launch`,
`slurm`, `doctor`, `plot`, `export`. The top level (`main.py`) imports no torch: `surge --help`
answers at once."""

from __future__ import annotations

from .main import build_parser, doctor_argv, main

__all__ = ["build_parser", "doctor_argv", "main"]
