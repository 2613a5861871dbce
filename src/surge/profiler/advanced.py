"""`profiler="advanced"`: the simple profiler's phases, plus cProfile inside each phase, so the
report names the Python functions that cost the most in each."""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, overload

from .base import LoopParts
from .simple import SimpleProfiler

if TYPE_CHECKING:
    import cProfile

    from ..trainer import Trainer


class AdvancedProfiler(SimpleProfiler):
    """`top`: how many functions to list per phase (by cumulative time)."""

    name = "advanced"

    def __init__(self, top: int = 8, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.top = top
        self.profiles: dict[str, cProfile.Profile] = {}

    @overload
    def _profiled(self, phase: str, fn: None) -> None: ...
    @overload
    def _profiled(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]: ...

    def _profiled(self, phase: str, fn: Callable[..., Any] | None) -> Callable[..., Any] | None:
        import cProfile  # with pstats: loaded when this profiler is used, not with surge

        if fn is None:
            return None
        profile = self.profiles.setdefault(phase, cProfile.Profile())

        def run(*args: Any, **kwargs: Any) -> Any:
            profile.enable()
            try:
                return fn(*args, **kwargs)
            finally:
                profile.disable()

        return run

    def instrument(self, parts: LoopParts) -> LoopParts:
        p = self._profiled
        profiled = replace(
            parts, move=p("transfer", parts.move), step=p("forward", parts.step),
            backward=p("backward", parts.backward), optimizer_step=p("optimizer", parts.optimizer_step),
            publish=p("logging", parts.publish),
        )  # fmt: skip
        return super().instrument(profiled)

    def function_tables(self) -> dict[str, str]:
        """Per phase, the `top` functions by cumulative time (pstats' table)."""
        import pstats

        tables = {}
        for phase, profile in self.profiles.items():
            if not profile.getstats():
                continue  # the phase never ran (e.g. no log interval was reached)
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(self.top)
            tables[phase] = out.getvalue()
        return tables

    def finish(self, trainer: Trainer) -> dict[str, Any] | None:
        report = super().finish(trainer)
        if report is not None:
            report["functions"] = self.function_tables()
        return report
