"""`lightning.fabric.utilities.warnings`: `PossibleUserWarning` (surge's warning category) and
`disable_possible_user_warnings`."""

from __future__ import annotations

import warnings

from ..utilities.warnings import PossibleUserWarning
from .rank_zero import LightningDeprecationWarning


def disable_possible_user_warnings(module: str = "") -> None:
    """Ignore `PossibleUserWarning`s (from the modules matching `module`; default: all)."""
    warnings.filterwarnings("ignore", module=module, category=PossibleUserWarning)


__all__ = ["LightningDeprecationWarning", "PossibleUserWarning", "disable_possible_user_warnings"]
