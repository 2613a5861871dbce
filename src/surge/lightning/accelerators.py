"""Lightning's `lightning.pytorch.accelerators` on surge's accelerators: `Trainer(accelerator=
CPUAccelerator())` is accepted, and `trainer.accelerator` is the object. TPUs (XLA) are refused."""

from __future__ import annotations

from typing import Any

import torch

from ..accelerators import Accelerator, CPUAccelerator, CUDAAccelerator, MPSAccelerator
from ..errors import MisconfigurationError, SurgeRuntimeError
from .refuse import module_getattr


class XLAAccelerator(Accelerator):
    """Importable; refused when built (surge does not run on TPUs)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise MisconfigurationError(
            "XLAAccelerator is not supported by surge: it does not run on TPUs. Use 'cuda' or 'cpu'."
        )

    @staticmethod
    def is_available() -> bool:
        return False


def find_usable_cuda_devices(num_devices: int = -1) -> list[int]:
    """The indices of the first `num_devices` CUDA devices a tensor can be created on (-1: all of
    them); as Lightning's, for `Trainer(devices=find_usable_cuda_devices(2))`."""
    if num_devices == 0:
        return []
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise ValueError(
            f"You requested to find {num_devices} devices but there are no visible CUDA devices on this machine."
        )
    wanted = count if num_devices == -1 else num_devices
    if wanted > count:
        raise ValueError(f"You requested to find {wanted} devices but this machine only has {count} GPUs.")
    usable: list[int] = []
    for index in range(count):
        try:
            torch.empty(1, device=torch.device("cuda", index))
        except RuntimeError:
            continue
        usable.append(index)
        if len(usable) == wanted:
            return usable
    raise SurgeRuntimeError(
        f"You requested to find {wanted} devices but only {len(usable)} are currently available. The devices "
        f"{[i for i in range(count) if i not in usable]} are occupied by other processes."
    )


_refused = module_getattr(
    "lightning.pytorch.accelerators",
    {
        "TPUAccelerator": "surge does not run on TPUs; use accelerator='cuda' or 'cpu'",
        "HPUAccelerator": "surge does not run on Gaudi HPUs; use accelerator='cuda' or 'cpu'",
    },
)


def __getattr__(name: str) -> Any:
    if name == "AcceleratorRegistry":  # built on first use: it lists surge's accelerators
        from .registries import accelerators

        return accelerators()
    return _refused(name)


__all__ = [
    "Accelerator",
    "CPUAccelerator",
    "CUDAAccelerator",
    "MPSAccelerator",
    "XLAAccelerator",
    "find_usable_cuda_devices",
]
