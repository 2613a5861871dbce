"""The CPU: always there; `devices=N` on CPU means N processes (distributed strategies)."""

from __future__ import annotations

from .base import Accelerator


class CPUAccelerator(Accelerator):
    name = "cpu"
