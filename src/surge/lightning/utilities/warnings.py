"""`lightning.pytorch.utilities.warnings` (and `lightning.fabric.utilities.warnings`):
`PossibleUserWarning`, the category of the warnings surge gives about a likely mistake."""

from __future__ import annotations

from ...rank_zero import SurgeWarning as PossibleUserWarning

__all__ = ["PossibleUserWarning"]
