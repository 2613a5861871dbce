"""`profiler="simple"`: each step's time by phase, host reads in the step, and the doctor's report."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..callbacks.base import Callback
from ..errors import SurgeRuntimeError
from .base import LoopParts, Profiler
from .mesh_comm import MeshTrace
from .syncs import SyncCounter
from .timing import PhaseTimer

if TYPE_CHECKING:
    from ..strategies import Strategy
    from ..trainer import Trainer


class SimpleProfiler(Profiler):
    """Phase timing (data, transfer, forward, backward, optimizer, callbacks, logging; validation
    as a whole; gradient communication from a DDP comm hook) and host reads counted on a few steps;
    on a device mesh, the communication of a few steps from torch.profiler's records (mesh_comm.py).
    At the end of fit the doctor prints where the time went and what to change."""

    name = "simple"

    def __init__(self, diagnose: bool = True, measure_workers: bool = True) -> None:
        self.diagnose = diagnose
        self.measure_workers = measure_workers
        self.timer: PhaseTimer | None = None
        self.syncs = SyncCounter()
        self.report: dict[str, Any] | None = None
        self.mesh: MeshTrace | None = None  # on a device mesh: its communication, from torch.profiler

    def setup(self, trainer: Trainer) -> None:
        module = trainer.lightning_module
        self.timer = PhaseTimer(module.device if module is not None else None)
        self.syncs = SyncCounter()
        self._hook_communication(trainer.strategy)
        on_mesh = trainer.strategy.device_mesh is not None
        self.mesh = MeshTrace(self.timer.clock, self.timer.exclude) if on_mesh else None

    def _phase_timer(self) -> PhaseTimer:
        if self.timer is None:
            raise SurgeRuntimeError("SimpleProfiler: setup(trainer) must run before it times or reports")
        return self.timer

    def callbacks(self) -> list[Callback]:
        return [_ValidationTimer(self)]

    def _hook_communication(self, strategy: Strategy) -> None:
        timer = self._phase_timer()

        def timing(allreduce_hook: Any) -> Any:
            def timed_allreduce(state, bucket):  # noqa: ANN001 - DDP checks these annotations, so none
                t0 = time.perf_counter()
                fut = allreduce_hook(state, bucket)

                def done(f: Any) -> Any:
                    timer.add_comm(time.perf_counter() - t0)
                    return f.value()[0] if isinstance(f.value(), list) else f.value()

                return fut.then(done)

            return timed_allreduce

        strategy.wrap_gradient_allreduce(timing)

    def instrument(self, parts: LoopParts) -> LoopParts:
        timer = self._phase_timer()
        batches = timer.wrap_iterator(parts.batches)
        return LoopParts(
            batches=self.mesh.wrap(batches) if self.mesh is not None else batches,
            move=timer.wrap("transfer", parts.move),
            step=timer.wrap("forward", self.syncs.wrap(parts.step)),
            backward=timer.wrap("backward", parts.backward),
            optimizer_step=timer.wrap("optimizer", parts.optimizer_step),
            start_module=timer.wrap("callbacks", parts.start_module),
            start_callbacks=timer.wrap_hooks(parts.start_callbacks),
            end_module=timer.wrap("callbacks", parts.end_module),
            end_callbacks=timer.wrap_hooks(parts.end_callbacks),
            publish=timer.wrap("logging", parts.publish),
        )

    def finish(self, trainer: Trainer) -> dict[str, Any] | None:
        timer = self._phase_timer()
        timer.finish()
        mesh = self.mesh.finish() if self.mesh is not None else None
        if not self.diagnose:
            self.report = {"summary": timer.summary()}
            return self.report
        from .doctor import Doctor

        self.report = Doctor(trainer, self, measure_workers=self.measure_workers, mesh=mesh).run()
        return self.report


class _ValidationTimer(Callback):
    """Times each validation inside fit as a whole (the sanity check, before timing starts, is not)."""

    def __init__(self, profiler: SimpleProfiler) -> None:
        self.profiler, self.started = profiler, 0.0

    def on_validation_start(self, trainer: Trainer, module: Any) -> None:
        self.started = time.perf_counter()

    def on_validation_end(self, trainer: Trainer, module: Any) -> None:
        timer = self.profiler.timer
        if timer is not None and trainer.fitting and not trainer.sanity_checking:
            timer.add_validation(time.perf_counter() - self.started)
