"""How `gradient_clip_val` clips: by the global norm or by value. A str enum, as Lightning's
`GradClipAlgorithmType`, so `trainer.gradient_clip_algorithm == "norm"` holds and hooks receive
the same type under `surge run` as under Lightning."""

from __future__ import annotations

from .str_enum import StrEnum


class GradClipAlgorithmType(StrEnum):
    """`"norm"`: clip the norm over all parameters together; `"value"`: clip each gradient value."""

    VALUE = "value"
    NORM = "norm"

    @staticmethod
    def supported_type(val: str) -> bool:
        return any(x.value == val for x in GradClipAlgorithmType)

    @staticmethod
    def supported_types() -> list[str]:
        return [x.value for x in GradClipAlgorithmType]
