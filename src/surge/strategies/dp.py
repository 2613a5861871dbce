"""`torch.nn.DataParallel`: one process drives every GPU, splitting each batch between them.

Kept for completeness: every step copies the weights to each GPU and gathers the outputs on the
first, so "ddp" (one process per GPU, only gradients travel) is faster, and this strategy says so.
What it gets right that a bare DataParallel does not:
- the loss is the sum over the replicas' losses weighted by their share of the batch, divided by
  the batch size, so with uneven splits it equals the single-device loss (a plain mean of the
  replicas' means weights a short last chunk as much as a full one);
- `self.log` in a replica is buffered and merged the same way, on the first device, after the
  replicas finish (replicas run in threads and must not race on the shared results);
- checkpoints hold the bare module's weights, loadable without DataParallel.
Only `training_step` is split; evaluation steps run on the first device.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from ..config.registry import register_strategy
from ..errors import MisconfigurationError
from ..metrics.results import infer_batch_size
from ..rank_zero import warn
from .base import Layout, Strategy


def chunk_sizes(batch_size: int, devices: int) -> list[int]:
    """How DataParallel's scatter splits `batch_size` samples over `devices` (as `Tensor.chunk`)."""
    per = math.ceil(batch_size / devices)
    return [min(per, batch_size - i * per) for i in range(math.ceil(batch_size / per))]


class _ReplicaLog:
    """Stands in for the results inside one replica: records `self.log` calls for the merge."""

    def __init__(self, batch: Any) -> None:
        self.batch = batch
        self.calls: list[tuple[str, Any, dict[str, Any]]] = []

    def log(self, name: str, value: Any, **options: Any) -> None:
        """Takes what `Results.log` takes (its options by keyword) and keeps it for the merge."""
        self.calls.append((name, value, options))


class _ReplicaStep(nn.Module):
    """What DataParallel replicates: runs `training_step` on a replica and returns what the merge needs."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, batch: Any, *args: Any) -> tuple[Any, list[Any]]:
        replica: Any = self.module  # a replica of the surge Module; its results become a _ReplicaLog here
        # A replica starts with the original's attributes; these two must be its own. With one
        # device DataParallel runs the original itself, so they are put back afterwards.
        log = _ReplicaLog(batch)
        saved = replica._attach(results=log, device=next(replica.parameters()).device)
        try:
            out = replica.training_step(batch, *args)  # (batch_idx unless the step takes only batch)
        finally:
            replica._attach(**saved)
        if isinstance(out, Tensor) and out.dim() == 0:
            out = out.reshape(1)
        elif isinstance(out, dict) and isinstance(out.get("loss"), Tensor) and out["loss"].dim() == 0:
            out = {**out, "loss": out["loss"].reshape(1)}
        return out, [log]


@register_strategy("dp")
class DataParallelStrategy(Strategy):
    """Split each batch over `device_ids` (CUDA) in one process."""

    name = "dp"

    @classmethod
    def from_layout(cls, layout: Layout) -> DataParallelStrategy:
        name, env = layout.accelerator.name, layout.env
        if name != "cuda":
            raise MisconfigurationError(
                f"strategy='dp' splits batches over CUDA devices, but accelerator={name!r}; "
                "use strategy='ddp' (faster anyway, and it runs on CPU)."
            )
        if layout.num_nodes > 1 or env.world_size > 1:
            raise MisconfigurationError(
                f"strategy='dp' runs in one process on one machine, but num_nodes={layout.num_nodes} and "
                f"WORLD_SIZE={env.world_size}; use strategy='ddp'."
            )
        strategy = cls(list(layout.devices))
        strategy.check_layout(layout)
        return strategy

    def __init__(self, device_ids: list[int]) -> None:
        super().__init__()
        if not device_ids:
            raise MisconfigurationError("strategy='dp' needs CUDA devices; use strategy='ddp' on CPU.")
        self.device_ids = list(device_ids)
        self.wrapped: nn.DataParallel | None = None
        self._weights: dict[tuple[int, ...], Tensor] = {}

    def setup_environment(self, device: torch.device) -> None:
        self.device = torch.device("cuda", self.device_ids[0])

    def setup_module(self, module: nn.Module) -> nn.Module:
        warn(
            "strategy='dp' copies the weights to every GPU each step; strategy='ddp' (one process per GPU) "
            "is faster and scales to many nodes."
        )
        self.module = module
        module.to(self.device)
        self.wrapped = nn.DataParallel(
            _ReplicaStep(module), device_ids=self.device_ids, output_device=self.device
        )
        return module

    def speed_advice(self) -> str:
        return (
            'strategy="dp" copies the weights to every GPU each step; '
            'strategy="ddp" is faster (one process per GPU, only gradients travel)'
        )

    def step_fn(self, module: nn.Module, hook: str) -> Callable[..., Any]:
        if hook != "training_step" or self.wrapped is None:
            return getattr(module, hook)
        wrapped, results_of = self.wrapped, module

        def step(batch: Any, *args: Any) -> Any:
            out, logs = wrapped(batch, *args)
            sizes = chunk_sizes(infer_batch_size(batch), len(self.device_ids))
            merge_logs(results_of._results, logs, sizes, self.device)
            return self.merge(out, sizes)

        return step

    def merge(self, out: Any, sizes: list[int]) -> Any:
        """The replicas' losses (gathered into a vector) as one loss over the whole batch."""
        if isinstance(out, dict):
            return {**out, "loss": self._weighted(out["loss"], sizes)}
        return self._weighted(out, sizes)

    def _weighted(self, losses: Tensor, sizes: list[int]) -> Tensor:
        key = tuple(sizes)
        weights = self._weights.get(key)
        if weights is None:  # one small tensor per batch size seen, not one per step
            total = sum(sizes)
            weights = self._weights[key] = torch.tensor([n / total for n in sizes], device=losses.device)
        return (losses.float() * weights).sum().to(losses.dtype)


def merge_logs(results: Any, logs: list[_ReplicaLog], sizes: list[int], device: torch.device) -> None:
    """Log each name once: a mean weights the replicas' values by their share of the batch; sum,
    max and min combine them as their names say."""
    if results is None or not logs or not logs[0].calls:
        return
    total = sum(sizes)
    for i, (name, _, options) in enumerate(logs[0].calls):
        reduce_fx = options["reduce_fx"]
        values = [
            v.detach().to(device, non_blocking=True).float() if isinstance(v, Tensor) else float(v)
            for v in (log.calls[i][1] for log in logs)
        ]
        if reduce_fx == "mean":
            merged = sum(v * (n / total) for v, n in zip(values, sizes))
        elif reduce_fx == "sum":
            merged = sum(values)
        else:
            stack = torch.stack([torch.as_tensor(v, device=device) for v in values])
            merged = stack.max() if reduce_fx == "max" else stack.min()
        batch_size = total if options["batch_size"] is None else options["batch_size"]
        results.log(name, merged, **{**options, "batch_size": batch_size})
