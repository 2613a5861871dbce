"""The dense 16-bit FLOP/s peaks of the GPUs surge knows: the MFU of a goodput report, the
`device/mfu` of a `ThroughputMonitor`."""

from __future__ import annotations

import torch

# Dense (no sparsity) bf16 tensor-core peaks, FLOP/s, by a substring of the device's name (first match).
PEAK_DENSE_FLOPS = (
    ("H200", 989e12),
    ("H100 PCIe", 756e12),
    ("H100", 989e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("L4", 121e12),
    ("A10G", 70e12),
    ("RTX 4090", 165e12),
)


def peak_flops(device: torch.device) -> tuple[str, float | None]:
    """The device's name and its dense bf16 peak (None: not in `PEAK_DENSE_FLOPS`, or not a GPU)."""
    if device.type != "cuda":
        return device.type, None
    name = torch.cuda.get_device_name(device)
    return name, next((peak for key, peak in PEAK_DENSE_FLOPS if key in name), None)
