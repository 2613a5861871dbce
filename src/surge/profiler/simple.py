"""`profiler="simple"`: each step's time by phase, host reads in the step, and the doctor's report."""

from __future__ import annotations

import time
from typing import Any

from .base import LoopParts, Profiler
from .syncs import SyncCounter
from .timing import PhaseTimer


class SimpleProfiler(Profiler):
    """Phase timing (data, transfer, forward, backward, optimizer, callbacks, logging; validation
    as a whole; gradient communication from a DDP comm hook) and host reads counted on a few steps.
    At the end of fit the doctor prints where the time went and what to change."""

    name = "simple"

    def __init__(self, diagnose: bool = True, measure_workers: bool = True) -> None:
        self.diagnose = diagnose
        self.measure_workers = measure_workers
        self.timer: PhaseTimer | None = None
        self.syncs = SyncCounter()
        self.report: dict[str, Any] | None = None

    def setup(self, trainer: Any) -> None:
        self.timer = PhaseTimer(trainer._module._device if trainer._module is not None else None)
        self.syncs = SyncCounter()
        validate = trainer._run_validation

        def timed_validation() -> None:
            t0 = time.perf_counter()
            try:
                validate()
            finally:
                self.timer.add_validation(time.perf_counter() - t0)

        trainer._run_validation = timed_validation
        self._hook_communication(trainer)

    def _hook_communication(self, trainer: Any) -> None:
        timer = self.timer

        def timing(allreduce_hook: Any) -> Any:
            def timed_allreduce(state, bucket):  # noqa: ANN001 - DDP checks these annotations, so none
                t0 = time.perf_counter()
                fut = allreduce_hook(state, bucket)

                def done(f: Any) -> Any:
                    timer.add_comm(time.perf_counter() - t0)
                    return f.value()[0] if isinstance(f.value(), list) else f.value()

                return fut.then(done)

            return timed_allreduce

        trainer.strategy.wrap_gradient_allreduce(timing)

    def instrument(self, parts: LoopParts) -> LoopParts:
        timer = self.timer
        return LoopParts(
            batches=timer.wrap_iterator(parts.batches),
            move=timer.wrap("transfer", parts.move),
            step=timer.wrap("forward", self.syncs.wrap(parts.step)),
            backward=timer.wrap("backward", parts.backward),
            optimizer_step=timer.wrap("optimizer", parts.optimizer_step),
            batch_start_hooks=(
                timer.wrap_hooks(parts.batch_start_hooks[0]),
                timer.wrap("callbacks", parts.batch_start_hooks[1]),
            ),  # fmt: skip
            batch_end_hooks=(
                timer.wrap_hooks(parts.batch_end_hooks[0]),
                timer.wrap("callbacks", parts.batch_end_hooks[1]),
            ),  # fmt: skip
            publish=timer.wrap("logging", parts.publish),
        )

    def finish(self, trainer: Any) -> dict[str, Any] | None:
        self.timer.finish()
        if not self.diagnose:
            self.report = {"summary": self.timer.summary()}
            return self.report
        from .doctor import Doctor

        self.report = Doctor(trainer, self, measure_workers=self.measure_workers).run()
        return self.report
