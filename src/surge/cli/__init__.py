"""The `surge` command (also `python -m surge`): `fit`/`validate`/`test`/`predict` from a config
(`config.py`), `run` (a Lightning script, unmodified), `demo`, `launch`, `slurm`, `doctor`, `plot`,
`export`. Each command imports what it runs."""

from __future__ import annotations

from .main import build_parser, doctor_argv, main

__all__ = ["build_parser", "doctor_argv", "main"]
