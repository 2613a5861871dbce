"""`lightning.pytorch.utilities.enums`: `GradClipAlgorithmType` (what `trainer.gradient_clip_algorithm`
holds) and `LightningEnum`, the str enum Lightning's enums derive from."""

from __future__ import annotations

from lightning_utilities.core.enums import StrEnum as LightningEnum

from ...config.clip_algorithm import GradClipAlgorithmType

__all__ = ["GradClipAlgorithmType", "LightningEnum"]
