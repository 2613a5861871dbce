"""Resolving `accelerator=` and `devices=` into an Accelerator and the device indices to use."""

from __future__ import annotations

from ..errors import MisconfigurationError, bad_value
from .base import Accelerator
from .cpu import CPUAccelerator
from .cuda import CUDAAccelerator
from .mps import MPSAccelerator

__all__ = [
    "Accelerator",
    "CPUAccelerator",
    "CUDAAccelerator",
    "MPSAccelerator",
    "resolve_accelerator",
    "resolve_devices",
]


def resolve_accelerator(name: str | Accelerator) -> Accelerator:
    """The accelerator for `accelerator=name`; "auto" picks cuda, then mps, then cpu; an
    Accelerator object is used as given, once it is known to be available."""
    if isinstance(name, Accelerator):
        if not name.is_available():
            raise MisconfigurationError(
                f"accelerator={type(name).__name__}() was given, but this machine has no {name.name} device; "
                "use accelerator='auto' or 'cpu'."
            )
        return name
    if name == "auto":
        for cls in (CUDAAccelerator, MPSAccelerator):
            if cls.is_available():
                return cls()
        return CPUAccelerator()
    named: type[Accelerator] = {
        "cpu": CPUAccelerator,
        "cuda": CUDAAccelerator,
        "gpu": CUDAAccelerator,
        "mps": MPSAccelerator,
    }[name]
    if not named.is_available():
        found = [c.name for c in (CUDAAccelerator, MPSAccelerator) if c.is_available()] + ["cpu"]
        raise MisconfigurationError(
            f"accelerator={name!r} was requested, but this machine has no {named.name} device "
            f"(torch {named.name} available: no). Available here: {found}; use accelerator='auto' or 'cpu'."
        )
    return named()


def resolve_devices(accelerator: Accelerator, devices: int | str | list[int]) -> list[int]:
    """Logical device indices for `devices=`: a count, -1 / "auto" (all), or explicit indices.

    On CPU the "indices" are process slots: `devices=N` means N processes.
    """
    if isinstance(accelerator, CPUAccelerator):
        if isinstance(devices, list):
            raise MisconfigurationError(
                f"devices={devices!r} lists device indices, but accelerator is cpu; pass a number of processes."
            )
        return list(range(1 if devices in ("auto", -1) else int(devices)))
    count = accelerator.device_count()
    if devices in ("auto", -1):
        return list(range(count))
    if isinstance(devices, int):
        if devices > count:
            raise MisconfigurationError(
                f"devices={devices} {accelerator.name} devices were requested, but {count} exist "
                f"(logical indices 0..{count - 1}, after CUDA_VISIBLE_DEVICES)."
            )
        return list(range(devices))
    if isinstance(devices, str):  # TrainerConfig turns "0,2" into a list and "2" into an int
        raise bad_value("devices", devices, '"auto", -1, a count, or a list of device indices')
    missing = [i for i in devices if i >= count]
    if missing:
        raise MisconfigurationError(
            f"devices={devices!r}: {accelerator.name} indices {missing} do not exist; this process sees "
            f"{count} (logical indices 0..{count - 1}, after CUDA_VISIBLE_DEVICES)."
        )
    return list(devices)
