"""Whose observable behaviour a run follows where surge's own API deliberately differs: surge's, or
Lightning's under `surge run` (the Lightning mode).

The mode marks itself with the `sys.meta_path` finder it installs (`lightning_semantics = True`);
nothing else is global. Read once where a part is built, never per step."""

from __future__ import annotations

import sys


def lightning() -> bool:
    """True in the Lightning mode (`surge run script.py`, its DDP ranks and its DataLoader workers)."""
    return any(getattr(finder, "lightning_semantics", False) is True for finder in sys.meta_path)
