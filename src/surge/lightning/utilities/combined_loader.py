"""`lightning.pytorch.utilities.combined_loader`: `CombinedLoader` is surge's own (`surge.data.CombinedLoader`)."""

from __future__ import annotations

from ...data.combined import CombinedLoader

__all__ = ["CombinedLoader"]
