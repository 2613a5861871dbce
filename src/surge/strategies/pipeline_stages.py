"""A pipeline's stages: which a rank holds, and the modules they run.

A module names its layers in one of two ways, checked once in `setup_module`:
- `pipeline_layers(self) -> nn.Sequential`: surge splits the sequence into `stages` consecutive runs
  balanced by layer count (the first `len % stages` stages take one layer more);
- `pipeline_stages(self, stage_indices, num_stages) -> list[nn.Module]`: the user builds this rank's
  stages (one module per index in `stage_indices`), e.g. for uneven layers.
Stage `s` lives on pipeline rank `s % pipeline_parallel` (the looped placement interleaved schedules
need), so a rank holds `stages_per_rank` stages. Layers of other ranks' stages are dropped from this
rank's module (their `nn.Sequential` entries become None), so each rank holds, trains and saves only
its own; a parameter outside every stage of this rank is refused (it would get no gradient).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from ..errors import MisconfigurationError, bad_value

# The schedules by the names torchtitan's users know; single-stage ones hold one stage per rank.
SCHEDULES = {"GPipe": "ScheduleGPipe", "1F1B": "Schedule1F1B", "Interleaved1F1B": "ScheduleInterleaved1F1B"}
SINGLE_STAGE = ("GPipe", "1F1B")


@dataclass(frozen=True)
class PipelineLayout:
    """`pipeline_parallel` ranks x `stages_per_rank` stages, run by `schedule`."""

    pipeline_parallel: int
    schedule: str
    stages_per_rank: int
    owner: str = "ModelParallel"

    @classmethod
    def of(cls, owner: str, pipeline_parallel: int, schedule: Any, stages_per_rank: Any) -> PipelineLayout:
        if schedule not in SCHEDULES:
            raise bad_value(f"{owner}(pipeline_schedule)", schedule, f"one of {list(SCHEDULES)}")
        if stages_per_rank is None:
            stages_per_rank = 1 if schedule in SINGLE_STAGE else 2
        if isinstance(stages_per_rank, bool) or not isinstance(stages_per_rank, int) or stages_per_rank < 1:
            raise bad_value(f"{owner}(stages_per_rank)", stages_per_rank, "an int >= 1")
        if schedule in SINGLE_STAGE and stages_per_rank != 1:
            raise MisconfigurationError(
                f"{owner}(pipeline_schedule={schedule!r}, stages_per_rank={stages_per_rank}): {schedule} runs "
                "one stage per rank. Use pipeline_schedule='Interleaved1F1B' for several, or stages_per_rank=1."
            )
        return cls(pipeline_parallel, schedule, stages_per_rank, owner)

    @property
    def num_stages(self) -> int:
        return self.pipeline_parallel * self.stages_per_rank

    def bubble(self, micro_batches: int) -> Bubble:
        return Bubble(self.pipeline_parallel, self.stages_per_rank, micro_batches, self.schedule)

    def stage_indices(self, pipeline_rank: int) -> list[int]:
        """The stages pipeline rank `pipeline_rank` runs (looped: rank r holds r, r + pp, ...)."""
        return [pipeline_rank + self.pipeline_parallel * j for j in range(self.stages_per_rank)]


@dataclass(frozen=True)
class Bubble:
    """The pipeline bubble: the share of a schedule run each stage idles, waiting to fill and drain,
    (p - 1) / (v * m + p - 1) for p pipeline ranks, v stages per rank and m micro-batches (GPipe and
    1F1B: v = 1; Interleaved1F1B shrinks it by its v stages per rank)."""

    pipeline_parallel: int
    stages_per_rank: int
    micro_batches: int
    schedule: str

    @property
    def fraction(self) -> float:
        p, v, m = self.pipeline_parallel, self.stages_per_rank, self.micro_batches
        return (p - 1) / (v * m + p - 1)

    def with_micro_batches(self, micro_batches: int) -> Bubble:
        return Bubble(self.pipeline_parallel, self.stages_per_rank, micro_batches, self.schedule)


def balanced_split(num_layers: int, num_stages: int) -> list[range]:
    """Consecutive layer ranges, one per stage, whose lengths differ by at most one."""
    base, extra = divmod(num_layers, num_stages)
    bounds = [0]
    for stage in range(num_stages):
        bounds.append(bounds[-1] + base + (stage < extra))
    return [range(a, b) for a, b in zip(bounds, bounds[1:])]


def build_stages(
    module: nn.Module, layout: PipelineLayout, pipeline_rank: int
) -> tuple[list[nn.Module], str]:
    """This rank's stage modules (in stage order) and a one-line description of the whole split."""
    indices = layout.stage_indices(pipeline_rank)
    name = type(module).__name__
    own_split = getattr(module, "pipeline_stages", None)
    layers = getattr(module, "pipeline_layers", None)
    if callable(own_split):
        stages = list(own_split(indices, layout.num_stages))
        if len(stages) != len(indices) or not all(isinstance(s, nn.Module) for s in stages):
            raise MisconfigurationError(
                f"{name}.pipeline_stages({indices}, {layout.num_stages}) must return {len(indices)} "
                f"nn.Module(s), one per stage index; it returned {stages!r:.200}."
            )
        shown = f"{layout.num_stages} stages from {name}.pipeline_stages()"
    elif callable(layers):
        stages, shown = _split_sequential(name, layers(), layout, indices)
    else:
        raise MisconfigurationError(
            f"{layout.owner}(pipeline_parallel={layout.pipeline_parallel}) needs to know {name}'s layers: "
            "define pipeline_layers(self) returning the nn.Sequential to split into stages, or "
            "pipeline_stages(self, stage_indices, num_stages) returning this rank's stage modules."
        )
    _check_covered(module, stages, indices)
    return stages, shown


def _split_sequential(
    name: str, seq: Any, layout: PipelineLayout, indices: list[int]
) -> tuple[list[nn.Module], str]:
    if not isinstance(seq, nn.Sequential):
        raise MisconfigurationError(
            f"{name}.pipeline_layers() must return an nn.Sequential to split into stages; it returned "
            f"{type(seq).__name__}."
        )
    keys = list(seq._modules)
    if len(keys) < layout.num_stages:
        raise MisconfigurationError(
            f"{name}.pipeline_layers() has {len(keys)} layers, fewer than the {layout.num_stages} stages "
            f"(pipeline_parallel={layout.pipeline_parallel} x stages_per_rank={layout.stages_per_rank}): "
            "give it more layers, or ask for fewer stages."
        )
    split = balanced_split(len(keys), layout.num_stages)
    stages: list[nn.Module] = [_Run(*(seq[i] for i in split[s])) for s in indices]
    mine = {i for s in indices for i in split[s]}
    for i, key in enumerate(keys):
        if i not in mine:
            seq.register_module(key, None)  # another rank's layer: not held, trained or saved here
    ranges = ", ".join(f"stage {s}: layers {r.start}-{r.stop - 1}" for s, r in enumerate(split))
    return stages, f"{len(keys)} layers of {name}.pipeline_layers() -> {ranges}"


class _Run(nn.Sequential):
    """Consecutive layers of the module's nn.Sequential, as one stage. torch's stages pass the items of
    a tuple the previous stage returned as separate arguments; nn.Sequential passes a layer's tuple
    on as one value, so the run takes them back as one."""

    def forward(self, *inputs: Any) -> Any:
        return super().forward(inputs[0] if len(inputs) == 1 else inputs)


def _check_covered(module: nn.Module, stages: list[nn.Module], indices: list[int]) -> None:
    inside = {id(p) for stage in stages for p in stage.parameters()}
    outside = [n for n, p in module.named_parameters() if id(p) not in inside]
    if outside:
        raise MisconfigurationError(
            f"{type(module).__name__}: parameters {outside[:5]} are outside this rank's pipeline stages "
            f"{indices}, so they would get no gradient. Move them into the layers the stages run "
            "(pipeline_layers() or pipeline_stages())."
        )
