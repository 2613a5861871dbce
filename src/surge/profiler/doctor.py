"""The doctor: from a profiled fit, the share of each phase, samples/s, peak memory, and a diagnosis
that names the bottleneck and the fix, with the numbers behind it.

Printed at the end of fit on rank zero, and written to the run directory as `doctor.json` and
`doctor.png` (the phase breakdown over steps; needs matplotlib).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..rank_zero import info
from .mesh_findings import MESH_KINDS, mesh_findings, mesh_lines

if TYPE_CHECKING:
    from ..callbacks.trainer_views import ProfiledFit
    from .mesh_comm import MeshComm

DATA_BOUND = 0.30  # share of the step spent waiting for data
COMM_BOUND = 0.20  # share of the step in gradient allreduce
SMALL_BATCH = 0.25  # share of device memory a step uses
REPORT_SHARE, REPORT_MIN_S, REPORT_MAX_S = 0.1, 1.0, 10.0  # what measuring worker counts may cost


class Doctor:
    """Builds the report for one fit from the profiler's measurements."""

    def __init__(
        self, trainer: ProfiledFit, profiler: Any, measure_workers: bool = True, mesh: MeshComm | None = None
    ) -> None:
        self.trainer, self.profiler = trainer, profiler
        self.measure_workers = measure_workers
        self.mesh = mesh  # on a device mesh: what its communication took (mesh_comm.py)

    def run(self) -> dict[str, Any]:
        t = self.trainer
        summary = self.profiler.timer.summary()
        batch_size = _batch_size(t.train_dataloader)
        report: dict[str, Any] = {
            "summary": summary,
            "world_size": t.world_size,
            "batch_size": batch_size,
            "samples_per_s": (batch_size * t.world_size / summary["step_s"])
            if summary["step_s"] and batch_size
            else None,
            "peak_memory_bytes": _peak_memory(_device(t)),
            "host_reads_per_step": self.profiler.syncs.per_step,
            "host_reads": dict(self.profiler.syncs.counts),
        }
        if self.mesh is not None:
            report["mesh"] = self.mesh.as_dict()
        bubble = t.strategy.pipeline_bubble()
        if bubble is not None:
            report["pipeline"] = {**vars(bubble), "bubble": bubble.fraction}
        report["findings"] = self.findings(report)
        report["bottleneck"] = report["findings"][0]["kind"] if report["findings"] else "compute"
        if t.is_global_zero:
            info(render(report))
            self._write(report)
        return report

    # -- the rules -------------------------------------------------------------------------
    def findings(self, report: dict[str, Any]) -> list[dict[str, Any]]:
        """Every rule that fires, most important first; each with `kind`, `message`, `numbers`."""
        t, summary = self.trainer, report["summary"]
        shares = summary.get("shares", {})
        out: list[dict[str, Any]] = []
        data_share = shares.get("data", 0.0)
        if data_share >= DATA_BOUND:
            out.append(self._data_bound(data_share, summary.get("trained_s", 0.0)))
        reads = report["host_reads_per_step"]
        if reads >= 1:
            counted = max(1, self.profiler.syncs.counted_steps)
            names = ", ".join(f"{k} x{v / counted:g}" for k, v in sorted(report["host_reads"].items()))
            out.append({
                "kind": "sync",
                "message": f"training_step forces {reads:.0f} host syncs per step ({names}); log the tensor instead "
                "(self.log keeps it on the device and reads it at log intervals)",
                "numbers": {"per_step": reads},
            })  # fmt: skip
        comm = summary.get("comm_share", 0.0)
        if comm >= COMM_BOUND:
            k = max(2, round(comm / 0.08))
            out.append({
                "kind": "communication",
                "message": f"gradient allreduce is {comm:.0%} of the step: accumulate_grad_batches={k} cuts it {k}x "
                "(non-final micro-batches skip the allreduce)",
                "numbers": {"share": comm},
            })  # fmt: skip
        out += mesh_findings(self.mesh, t.strategy)
        advice = t.strategy.speed_advice()
        if advice:
            out.append({"kind": "strategy", "message": advice, "numbers": {}})
        device = _device(t)
        if device.type == "cuda":
            out += self._gpu_findings(device, report)
        if not out or out[0]["kind"] not in ("data", "sync", "communication", *MESH_KINDS):
            compute = sum(shares.get(p, 0.0) for p in ("forward", "backward", "optimizer"))
            sps = report["samples_per_s"]
            out.insert(0, {
                "kind": "compute",
                "message": f"compute-bound: forward, backward and the optimizer take {compute:.0%} of each step"
                + (f" ({sps:,.0f} samples/s)" if sps else "")
                + "; make the model cheaper (compile=True, bf16-mixed on a GPU) or add devices",
                "numbers": {"share": compute, "samples_per_s": sps},
            })  # fmt: skip
        return out

    def _data_bound(self, share: float, trained_s: float) -> dict[str, Any]:
        loader = self.trainer.train_dataloader
        workers = getattr(loader, "num_workers", 0)
        finding: dict[str, Any] = {"kind": "data", "numbers": {"share": share, "num_workers": workers}}
        base = f"{share:.0%} of each step waits for data with num_workers={workers}"
        result = None
        if self.measure_workers and hasattr(loader, "dataset"):
            from ..tune import measure_num_workers

            budget = report_budget(trained_s)
            result = measure_num_workers(loader, budget_s=budget)
            finding["numbers"].update(measured_s=result.spent_s, budget_s=budget)
            if len(result.throughput) < 2:  # the budget ran out before a worker count was timed
                result = None
                base += f" (no worker count could be timed within the report's {budget:.1f} s)"
        if result is not None and result.num_workers != workers and result.speedup >= 1.2:
            finding["numbers"].update(best=result.num_workers, speedup=result.speedup)
            finding["message"] = (
                f"{base}; num_workers={result.num_workers} measured {result.speedup:.1f}x faster: "
                'Trainer(num_workers="auto") sets it'
            )
        elif result is not None:
            finding["numbers"].update(speedup=result.speedup)
            finding["message"] = (
                f"{base}, and more workers measured only {result.speedup:.2f}x faster: preprocess once and cache "
                "the samples, surge.data.cache(dataset, path)"
            )
        else:
            finding["message"] = (
                f'{base}: try Trainer(num_workers="auto"), or surge.data.cache(dataset, path)'
            )
        return finding

    def _gpu_findings(self, device: torch.device, report: dict[str, Any]) -> list[dict[str, Any]]:
        out = []
        t = self.trainer
        major, _ = torch.cuda.get_device_capability(device)
        if t.precision_plugin.fp32_matmuls and major >= 8:
            out.append({"kind": "precision", "message": 'fp32 on a GPU with tensor cores: precision="bf16-mixed" '
                        "(about 2x the matmul throughput, half the activation memory)", "numbers": {"capability": major}})  # fmt: skip
        peak, total = report["peak_memory_bytes"], torch.cuda.get_device_properties(device).total_memory
        if peak and peak / total < SMALL_BATCH:
            out.append({
                "kind": "batch",
                "message": f"batch {report['batch_size']} uses {peak / total:.0%} of device memory: surge.tune.find_batch_size "
                "finds the largest that fits; set effective_batch_size to keep the optimizer's batch",
                "numbers": {"memory_share": peak / total},
            })  # fmt: skip
        return out

    def _write(self, report: dict[str, Any]) -> None:
        folder = Path(self.trainer.log_dir)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "doctor.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
        report["json"] = str(folder / "doctor.json")
        try:
            from .plotting import plot_phases
        except ImportError:
            return
        try:
            report["png"] = str(plot_phases(self.profiler.timer.steps, folder / "doctor.png"))
        except ImportError as err:
            info(f"doctor.png not drawn: {err}")


def report_budget(trained_s: float) -> float:
    """Seconds the report may spend measuring worker counts: a tenth of the training it reports on,
    at least 1 s (one count's start-up and a few batches), at most 10 s."""
    return min(REPORT_MAX_S, max(REPORT_MIN_S, REPORT_SHARE * trained_s))


def render(report: dict[str, Any]) -> str:
    """The report as text: phase shares, throughput, memory, then the findings."""
    s = report["summary"]
    lines = [f"surge doctor: {s['steps']} steps, {s['step_s'] * 1e3:.2f} ms per step"]
    for phase, share in sorted(s.get("shares", {}).items(), key=lambda kv: -kv[1]):
        if share >= 0.005:
            lines.append(f"  {phase:<10} {share:6.1%}  {s['phases'][phase] * 1e3:8.2f} ms")
    if "comm_share" in s:
        lines.append(f"  {'allreduce':<10} {s['comm_share']:6.1%}  (overlaps backward)")
    lines += mesh_lines(report)
    if report["samples_per_s"]:
        lines.append(
            f"  {report['samples_per_s']:,.0f} samples/s; validation {s.get('validation_s', 0):.2f} s in all"
        )
    if report["peak_memory_bytes"]:
        lines.append(f"  peak memory {report['peak_memory_bytes'] / 2**20:,.0f} MiB")
    lines.append(f"bottleneck: {report['bottleneck']}")
    lines += [f"  - {f['message']}" for f in report["findings"]]
    return "\n".join(lines)


def _device(trainer: ProfiledFit) -> torch.device:
    module = trainer.lightning_module
    assert module is not None, "the doctor reports on a fit, which has a module"
    return module.device


def _batch_size(loader: Any) -> int | None:
    return getattr(loader, "batch_size", None)


def _peak_memory(device: torch.device) -> int | None:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    try:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    except (ImportError, OSError):
        return None
