"""The doctor's findings on a device mesh: tensor-parallel collectives, FSDP's gathers and
reductions, pipeline sends and receives (measured, mesh_comm.py) and the pipeline bubble (from the
schedule's shape, with the measured wait beside it), each with its fix."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..strategies.pipeline_stages import Bubble
from .mesh_comm import FSDP, PIPELINE, TENSOR_PARALLEL

if TYPE_CHECKING:
    from .mesh_comm import MeshComm

MESH_COMM_BOUND = 0.20  # share of the step in one kind of mesh communication
BUBBLE_BOUND = 0.20  # share of a schedule run each pipeline stage idles
MESH_KINDS = ("tensor_parallel", "fsdp", "pipeline_comm", "pipeline_bubble")


def mesh_findings(comm: MeshComm | None, strategy: Any) -> list[dict[str, Any]]:
    """Every mesh rule that fires, the largest share first."""
    out: list[dict[str, Any]] = []
    sizes = _sizes(strategy.device_mesh)
    bubble = strategy.pipeline_bubble()
    if comm is not None:
        out += _communication(comm, sizes, bubble)
    if bubble is not None and bubble.fraction >= BUBBLE_BOUND:
        out.append(_bubble(bubble, comm))
    return sorted(out, key=lambda f: -f["numbers"]["share"])


def _sizes(mesh: Any) -> dict[str, int]:
    if mesh is None:
        return {}
    return dict(zip(mesh.mesh_dim_names or (), mesh.shape))


def _communication(comm: MeshComm, sizes: dict[str, int], bubble: Bubble | None) -> list[dict[str, Any]]:
    out = []
    tp, dp = sizes.get("tensor_parallel", 1), sizes.get("data_parallel", 1)
    share, n = comm.share(TENSOR_PARALLEL), comm.per_step(TENSOR_PARALLEL)
    if share >= MESH_COMM_BOUND:
        fewer = (
            f", or fewer tensor-parallel ranks: ModelParallel(data_parallel={dp * 2}, tensor_parallel={tp // 2})"
            if tp >= 2 and tp % 2 == 0
            else ""
        )
        out.append({
            "kind": "tensor_parallel",
            "message": f"tensor-parallel collectives (DTensor's all-reduces and all-gathers in forward and backward, "
            f"{n:g} per step) take {share:.0%} of the step: keep tensor_parallel within one node's fast links"
            + fewer,
            "numbers": {"share": share, "per_step": n, "tensor_parallel": tp},
        })  # fmt: skip
    share, n = comm.share(FSDP), comm.per_step(FSDP)
    if share >= MESH_COMM_BOUND:
        out.append({
            "kind": "fsdp",
            "message": f"FSDP's all-gathers and reduce-scatters over the data-parallel ranks ({n:g} per step) take "
            f"{share:.0%} of the step: reshard_after_forward=False (no second all-gather in backward), "
            "larger shard units (fewer, bigger gathers), or accumulate_grad_batches (one reduce-scatter per window)",
            "numbers": {"share": share, "per_step": n},
        })  # fmt: skip
    # receives wait for the neighbour: what is beyond the bubble's idle time is the transfers'
    idle = bubble.fraction * comm.schedule_s / comm.wall_s if bubble is not None and comm.wall_s else 0.0
    share = comm.share(PIPELINE) - idle
    if share >= MESH_COMM_BOUND:
        out.append({
            "kind": "pipeline_comm",
            "message": f"sends and receives between pipeline stages take {share:.0%} of the step beyond the "
            "bubble: fewer pipeline stages (pipeline_parallel) if the model fits, or fewer, larger micro-batches",
            "numbers": {"share": share, "per_step": comm.per_step(PIPELINE)},
        })  # fmt: skip
    return out


def _bubble(bubble: Bubble, comm: MeshComm | None) -> dict[str, Any]:
    p, v, m = bubble.pipeline_parallel, bubble.stages_per_rank, bubble.micro_batches
    more = bubble.with_micro_batches(4 * m)
    measured = comm.waiting_share if comm is not None and comm.schedule_runs else None
    seen = (
        f" (measured: {measured:.0%} of the schedule waiting on a neighbour)" if measured is not None else ""
    )
    fixes = f"more micro-batches per step: accumulate_grad_batches={4 * m} makes it {more.fraction:.0%}"
    if bubble.schedule != "Interleaved1F1B":
        interleaved = Bubble(p, 2, m, "Interleaved1F1B")
        fixes += f", or pipeline_schedule='Interleaved1F1B' (2 stages per rank: {interleaved.fraction:.0%})"
    return {
        "kind": "pipeline_bubble",
        "message": f"pipeline bubble: with {p} stages{f' x {v} per rank' if v > 1 else ''} and {m} micro-batches "
        f"({bubble.schedule}) each stage idles (p-1)/(v*m+p-1) = {bubble.fraction:.0%} of a step{seen}; {fixes}",
        "numbers": {"share": bubble.fraction, "micro_batches": m, "stages": p * v, "measured_wait": measured},
    }


def mesh_lines(report: dict[str, Any]) -> list[str]:
    """The report's lines for a mesh: each kind of communication's share and count, the bubble."""
    lines = []
    mesh, pipeline = report.get("mesh"), report.get("pipeline")
    if mesh and mesh["steps"]:
        names = {TENSOR_PARALLEL: "tensor-parallel", FSDP: "fsdp", PIPELINE: "send/recv"}
        for kind, name in names.items():
            if mesh[kind]["per_step"]:
                share, n = mesh[kind]["share"], mesh[kind]["per_step"]
                lines.append(
                    f"  {name:<15} {share:6.1%}  ({n:g} collectives per step, {mesh['steps']} steps profiled)"
                )
    if pipeline:
        waited = (mesh or {}).get("schedule", {}).get("waiting_share")
        seen = f"; measured wait {waited:.0%}" if waited is not None else ""
        lines.append(
            f"  pipeline bubble {pipeline['bubble']:6.1%}  ({pipeline['pipeline_parallel']} ranks, "
            f"{pipeline['micro_batches']} micro-batches, {pipeline['schedule']}{seen})"
        )
    return lines
