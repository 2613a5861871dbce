"""`Throughput`: rolling rates (batches, samples, items, FLOPs per second) over the last
`window_size` updates of monotonically increasing totals. Host numbers only: no tensors."""

from __future__ import annotations

from collections import deque

import torch

from ..accelerators.peak_flops import peak_flops
from ..errors import bad_value
from ..rank_zero import warn


class _Rising(list):
    """The last `maxlen` values appended, each larger than the one before (a counter or clock that
    goes backwards is a caller's mistake, refused as Lightning refuses it)."""

    def __init__(self, maxlen: int) -> None:
        super().__init__()
        self.maxlen = maxlen

    def append(self, value: float) -> None:
        if self and self[-1] >= value:
            raise ValueError(f"Expected the value to increase, last: {self[-1]}, current: {value}")
        super().append(value)
        if len(self) > self.maxlen:
            del self[0]

    @property
    def full(self) -> bool:
        return len(self) == self.maxlen


class Throughput:
    """Lightning's `Throughput(available_flops=None, world_size=1, window_size=100, separator="/")`.

    `update(time=, batches=, samples=, lengths=None, flops=None)` takes this device's totals so far
    (`flops`: the FLOPs since the last update); `compute()` gives `time`, `batches`, `samples`
    (`lengths`), and once `window_size` updates are in, `device/batches_per_sec`,
    `device/samples_per_sec` (`device/items_per_sec`, `device/flops_per_sec`, `device/mfu` with
    `available_flops`), and the all-device rates without the `device/` prefix when `world_size` > 1.
    """

    def __init__(
        self,
        available_flops: float | None = None,
        world_size: int = 1,
        window_size: int = 100,
        separator: str = "/",
    ) -> None:
        if world_size < 1:
            raise bad_value("Throughput(world_size)", world_size, "an int >= 1")
        if window_size < 2:
            raise bad_value("Throughput(window_size)", window_size, "an int >= 2 (rates need two updates)")
        self.available_flops, self.world_size, self.separator = available_flops, world_size, separator
        self._time = _Rising(window_size)
        self._batches = _Rising(window_size)
        self._samples = _Rising(window_size)
        self._lengths = _Rising(window_size)
        self._flops: deque[float] = deque(maxlen=window_size)

    def update(
        self,
        *,
        time: float,
        batches: int,
        samples: int,
        lengths: int | None = None,
        flops: float | None = None,
    ) -> None:
        """Record the totals at `time` seconds (see the class)."""
        self._time.append(time)
        if samples < batches:
            raise ValueError(f"Expected samples ({samples}) to be greater or equal than batches ({batches})")
        self._batches.append(batches)
        self._samples.append(samples)
        if lengths is not None:
            if lengths < samples:
                raise ValueError(
                    f"Expected lengths ({lengths}) to be greater or equal than samples ({samples})"
                )
            self._lengths.append(lengths)
            if len(self._samples) != len(self._lengths):
                raise RuntimeError(
                    f"If lengths are passed ({len(self._lengths)}), there needs to be the same number of samples"
                    f" ({len(self._samples)})"
                )
        if flops is not None:
            self._flops.append(flops * self.world_size)  # all devices' FLOPs

    def compute(self) -> dict[str, int | float]:
        """The totals and, over a full window, the rates (see the class)."""
        dev = f"device{self.separator}"
        metrics: dict[str, int | float] = {
            "time": self._time[-1], "batches": self._batches[-1], "samples": self._samples[-1]
        }  # fmt: skip
        if self._lengths:
            metrics["lengths"] = self._lengths[-1]
        many = self.world_size > 1
        if self._time.full:
            elapsed = self._time[-1] - self._time[0]
            rates = {
                "batches_per_sec": (self._batches[-1] - self._batches[0]) / elapsed,
                "samples_per_sec": (self._samples[-1] - self._samples[0]) / elapsed,
            }
            self._add_rates(metrics, rates, many)
            if self._lengths.full:
                self._add_rates(
                    metrics, {"items_per_sec": (self._lengths[-1] - self._lengths[0]) / elapsed}, many
                )
        if len(self._flops) == self._flops.maxlen:
            flops_per_sec = (sum(self._flops) - self._flops[0]) / (self._time[-1] - self._time[0])
            if many:
                metrics["flops_per_sec"] = flops_per_sec
            metrics[dev + "flops_per_sec"] = flops_per_sec / self.world_size
            if self.available_flops:
                metrics[dev + "mfu"] = flops_per_sec / self.world_size / self.available_flops
        return metrics

    def _add_rates(self, metrics: dict[str, int | float], rates: dict[str, float], many: bool) -> None:
        """This device's `rates` under `device/`, then (several devices) all devices' without it."""
        metrics.update({f"device{self.separator}{key}": rate for key, rate in rates.items()})
        if many:
            metrics.update({key: rate * self.world_size for key, rate in rates.items()})

    def reset(self) -> None:
        """Forget every update."""
        for window in (self._time, self._batches, self._samples, self._lengths, self._flops):
            window.clear()


_PEAK_DTYPES = (torch.bfloat16, torch.float16)


def get_available_flops(device: torch.device, dtype: torch.dtype | str) -> int | None:
    """The device's theoretical FLOP/s for `dtype`: on CUDA, the dense 16-bit peak of surge's table
    (`PEAK_DENSE_FLOPS`) for bfloat16/float16; None elsewhere (the CPU, other
    dtypes, a GPU not in the table: with a warning for the last two, as Lightning warns)."""
    if device.type != "cuda":
        return None
    name, peak = peak_flops(device)
    if peak is None:
        warn(f"FLOPs not found for {name!r}")
        return None
    if dtype not in _PEAK_DTYPES:
        warn(f"{name!r}: surge knows the 16-bit peak only, not the one of {dtype}")
        return None
    return int(peak)
