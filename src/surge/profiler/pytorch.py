"""`profiler="pytorch"`: `torch.profiler` over a schedule of steps, with a trace for TensorBoard's
profiler plugin and for Chrome (`chrome://tracing`, Perfetto), and an operator table."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..errors import SurgeRuntimeError
from ..rank_zero import info
from .base import LoopParts, Profiler

if TYPE_CHECKING:
    from ..trainer import Trainer


class PyTorchProfiler(Profiler):
    """Skip `wait` steps, warm up for `warmup`, record `active` steps; traces go to
    `<log_dir>/profiler` (or `dirpath`). `record_shapes`, `profile_memory`, `with_stack` as in torch."""

    name = "pytorch"

    def __init__(
        self,
        wait: int = 1,
        warmup: int = 1,
        active: int = 3,
        dirpath: str | Path | None = None,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
    ) -> None:
        self.schedule = torch.profiler.schedule(wait=wait, warmup=warmup, active=active, repeat=1)
        self.dirpath = Path(dirpath) if dirpath is not None else None
        self.options = {
            "record_shapes": record_shapes,
            "profile_memory": profile_memory,
            "with_stack": with_stack,
        }
        self.profile: torch.profiler.profile | None = None
        self.table = ""

    def setup(self, trainer: Trainer) -> None:
        folder = self.dirpath or Path(trainer.log_dir) / "profiler"
        folder.mkdir(parents=True, exist_ok=True)
        self.dirpath = folder
        activities = [torch.profiler.ProfilerActivity.CPU]
        module = trainer.lightning_module
        if module is not None and module.device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.profile = torch.profiler.profile(
            activities=activities,
            schedule=self.schedule,
            on_trace_ready=torch.profiler.tensorboard_trace_handler(
                str(folder), worker_name=f"rank{trainer.global_rank}"
            ),
            record_shapes=self.options["record_shapes"],
            profile_memory=self.options["profile_memory"],
            with_stack=self.options["with_stack"],
        )
        self.profile.__enter__()

    def instrument(self, parts: LoopParts) -> LoopParts:
        profile, batches = self.profile, parts.batches
        if profile is None:
            raise SurgeRuntimeError("PyTorchProfiler.instrument() was called before setup().")

        def stepping() -> Any:
            for batch in batches:
                yield batch
                profile.step()

        parts.batches = stepping()
        return parts

    def finish(self, trainer: Trainer) -> dict[str, Any] | None:
        if self.profile is None or self.dirpath is None:  # setup() never ran
            return None
        self.profile.__exit__(None, None, None)
        try:
            self.table = self.profile.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
        except Exception:  # no step was recorded (a run shorter than the schedule)
            self.table = ""
        traces = sorted(str(p) for p in self.dirpath.glob("*.json"))
        info(f"torch.profiler traces in {self.dirpath} (TensorBoard: tensorboard --logdir {self.dirpath}; "
             f"Chrome/Perfetto: open the .json)\n{self.table}")  # fmt: skip
        return {"traces": traces, "table": self.table}
