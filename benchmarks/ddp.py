"""Two-process DDP benchmarks (gloo on 127.0.0.1): surge vs a hand-written torchrun loop.

    python benchmarks/ddp.py --repeats 5 --accum-repeats 3

Every run is a fresh job with its own process group (`ddp_child.py`): surge as `python ddp_child.py`
(surge starts rank 1 itself), the raw loop under `python -m torch.distributed.run --nproc-per-node 2`.
Runs are interleaved (raw, surge, raw, surge, ...). Two benchmarks:

- throughput: global samples/s of the same model, data, order and step count;
- accumulate: k micro-batches per optimizer step, with and without `no_sync`, counting DDP's bucket
  allreduces with a comm hook.

Prints markdown tables and writes benchmarks/results/ddp_latest.json (a dated copy goes to results/raw/).
Fails loudly if a run did not take the asked number of steps, its loss did not fall, or surge's final
loss differs from the raw loop's.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from run import BenchmarkError, child_env, save_report, snapshot_surge

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"
CHILD = BENCH / "ddp_child.py"
THROUGHPUT_GOAL = 0.97  # surge's samples/s over the raw loop's, at least
LOSS_RTOL = 1e-4
RUN_TIMEOUT_S = 300
MODELS = {
    "mlp": "MLP 256-1024-1024-10 (1.32 M parameters, SGD)",
    "cnn": "the CNN of workloads.py (26 k parameters, Adam)",
}
# Variables that would make a child join some other job instead of starting its own.
FOREIGN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
               "MASTER_ADDR", "MASTER_PORT", "SURGE_LAUNCHED", "SURGE_GLOBAL_SEED")  # fmt: skip


@dataclass(frozen=True)
class Variant:
    """One contestant of one benchmark."""

    bench: str  # "throughput" or "accumulate"
    contestant: str  # "raw" or "surge"
    no_sync: bool = True
    bucket_view: bool = True  # raw only: DDP(gradient_as_bucket_view=...), True like surge's default

    @property
    def label(self) -> str:
        if self.bench == "throughput":
            return self.contestant if self.bucket_view else f"{self.contestant}, DDP defaults"
        return f"{self.contestant}, {'no_sync' if self.no_sync else 'sync every micro-batch'}"


THROUGHPUT = (
    Variant("throughput", "raw"),
    Variant("throughput", "surge"),
    Variant("throughput", "raw", bucket_view=False),
)
ACCUMULATE = (
    Variant("accumulate", "raw", no_sync=True),
    Variant("accumulate", "surge", no_sync=True),
    Variant("accumulate", "raw", no_sync=False),
    Variant("accumulate", "surge", no_sync=False),
)


def free_port() -> int:
    """A loopback TCP port nobody listens on right now (torchrun's rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job_env(surge_parent: Path) -> dict[str, str]:
    """The children's environment: surge snapshot first, 1 OpenMP thread, gloo on loopback, no job vars."""
    env = child_env(surge_parent)
    for var in [*FOREIGN_ENV, *(v for v in env if v.startswith("SLURM_"))]:
        env.pop(var, None)
    env.update(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    return env


def command(variant: Variant, args: argparse.Namespace, out: Path) -> list[str]:
    """The command line of one job."""
    accum = variant.bench == "accumulate"
    child = [
        str(CHILD), "--contestant", variant.contestant, "--bench", variant.bench, "--model", args.model,
        "--steps", str(args.accum_steps if accum else args.steps),
        "--warmup", str(args.accum_warmup if accum else args.warmup),
        "--accumulate", str(args.accumulate), "--no-sync", "on" if variant.no_sync else "off",
        "--bucket-view", "on" if variant.bucket_view else "off",
        "--threads", str(args.threads), "--out", str(out),
    ]  # fmt: skip
    if variant.contestant == "surge":
        return [sys.executable, *child]
    torchrun = ["-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
                "--master-addr", "127.0.0.1", "--master-port", str(free_port())]  # fmt: skip
    return [sys.executable, *torchrun, *child]


def run_job(variant: Variant, args: argparse.Namespace, env: dict[str, str], tmp: Path) -> dict[str, Any]:
    """One job in its own session (killed whole on timeout); rank 0's JSON result."""
    out = tmp / f"result-{time.monotonic_ns()}.json"
    cmd = command(variant, args, out)
    proc = subprocess.Popen(
        cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        output, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        raise BenchmarkError(
            f"{' '.join(cmd)} timed out after {RUN_TIMEOUT_S} s:\n{output[-3000:]}"
        ) from None
    if proc.returncode != 0 or not out.exists():
        raise BenchmarkError(f"{' '.join(cmd)} exited with {proc.returncode}:\n{output[-3000:]}")
    result = json.loads(out.read_text())
    result["label"], result["command"] = variant.label, " ".join(cmd)
    return result


def check(runs: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    """Assert every run trained as asked and surge like the raw loop; what was checked, as lines."""
    problems, lines = [], []
    for bench, steps in (("throughput", args.steps), ("accumulate", args.accum_steps)):
        mine = [r for r in runs if r["bench"] == bench]
        if not mine:
            continue
        for r in mine:
            problems += run_problems(bench, r, steps)
        lines.append(
            f"{bench}: {len(mine)} runs, each {steps} optimizer steps on 2 gloo processes; " + losses(mine)
        )
    problems += loss_vs_raw(runs)
    if problems:
        raise BenchmarkError("correctness checks failed:\n  " + "\n  ".join(problems))
    return lines


def run_problems(bench: str, r: dict[str, Any], steps: int) -> list[str]:
    """What is wrong with one run: its step count, its loss not falling, its world."""
    problems = []
    if r["steps"] != steps:
        problems.append(f"{bench}/{r['label']} took {r['steps']} optimizer steps, not {steps}")
    if not r["loss_after"] < r["loss_before"]:
        problems.append(
            f"{bench}/{r['label']}: held-out loss did not fall ({r['loss_before']:.4f} -> {r['loss_after']:.4f})"
        )
    if r["world_size"] != 2 or r["backend"] != "gloo":
        problems.append(f"{bench}/{r['label']}: world size {r['world_size']}, backend {r['backend']}")
    return problems


def loss_vs_raw(runs: list[dict[str, Any]]) -> list[str]:
    """Throughput runs whose final held-out loss strays from the raw loop's median."""
    raw = [r["loss_after"] for r in runs if r["bench"] == "throughput" and r["label"] == "raw"]
    if not raw:
        return []
    ref = statistics.median(raw)
    return [
        f"throughput/{r['label']}: final held-out loss {r['loss_after']:.6f} vs raw's {ref:.6f}"
        for r in runs
        if r["bench"] == "throughput"
        and r["label"] != "raw"
        and abs(r["loss_after"] - ref) > LOSS_RTOL * abs(ref)
    ]


def losses(runs: list[dict[str, Any]]) -> str:
    """The held-out loss before and after, per variant (every repeat)."""
    parts = []
    for label in dict.fromkeys(r["label"] for r in runs):
        after = sorted({f"{r['loss_after']:.6f}" for r in runs if r["label"] == label})
        before = sorted({f"{r['loss_before']:.4f}" for r in runs if r["label"] == label})
        parts.append(f"{label}: {'/'.join(before)} -> {'/'.join(after)}")
    return "held-out loss " + "; ".join(parts)


def med_range(values: list[float], fmt: str) -> tuple[str, str]:
    """Median and min–max, formatted."""
    return format(statistics.median(values), fmt), f"{min(values):{fmt}}–{max(values):{fmt}}"


def throughput_table(runs: list[dict[str, Any]]) -> list[str]:
    """Samples/s per contestant, with its ratio to raw's (of medians, and paired by repeat)."""
    mine = [r for r in runs if r["bench"] == "throughput"]
    raw_sps = [r["samples_per_sec"] for r in mine if r["label"] == "raw"]
    if not raw_sps:
        return []
    out = [
        "| contestant | samples/s (global) | min–max | vs raw | paired | time/step | rank-0 CPU/step | goal |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for label in dict.fromkeys(r["label"] for r in mine):
        rows = [r for r in mine if r["label"] == label]
        sps = [r["samples_per_sec"] for r in rows]
        ratio = statistics.median(sps) / statistics.median(raw_sps)
        paired = statistics.median(s / r for s, r in zip(sps, raw_sps))
        med, rng = med_range(sps, ".0f")
        step = statistics.median(r["sec_per_step"] for r in rows) * 1e3
        cpu = statistics.median(r["cpu_sec_per_step"] for r in rows) * 1e3
        passed = "PASS" if ratio >= THROUGHPUT_GOAL else "FAIL"
        goal = f">= {THROUGHPUT_GOAL}x: {passed}" if label == "surge" else ""
        out.append(
            f"| {label} | {med} | {rng} | {ratio:.3f}x | {paired:.3f}x | {step:.2f} ms | {cpu:.2f} ms | {goal} |"
        )
    return out


def ddp_kwargs(runs: list[dict[str, Any]]) -> str:
    """What each contestant's DistributedDataParallel wrapper was given."""
    seen = {r["label"]: r["ddp_kwargs"] for r in runs if r["bench"] == "throughput"}
    return "DDP wrapper arguments: " + "; ".join(f"{label}: `{kw}`" for label, kw in seen.items())


def accumulate_table(runs: list[dict[str, Any]], k: int) -> list[str]:
    """Allreduces and time per optimizer step of every accumulation variant."""
    mine = [r for r in runs if r["bench"] == "accumulate"]
    if not mine:
        return []
    ref = [r["sec_per_step"] for r in mine if r["contestant"] == "raw" and r["no_sync"]]
    out = [
        "| contestant | bucket allreduces / optimizer step | MB allreduced / step | time / optimizer step | "
        "min–max | vs raw no_sync | paired | rank-0 CPU/step | goal |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for label in dict.fromkeys(r["label"] for r in mine):
        rows = [r for r in mine if r["label"] == label]
        secs = [r["sec_per_step"] for r in rows]
        calls = statistics.median(r["allreduces_per_step"] for r in rows)
        mb = statistics.median(r["allreduced_mb"] / r["steps"] for r in rows)
        med, rng = med_range([x * 1e3 for x in secs], ".1f")
        vs = statistics.median(secs) / statistics.median(ref) if ref else float("nan")
        paired = statistics.median(x / r for x, r in zip(secs, ref)) if ref else float("nan")
        cpu = statistics.median(r["cpu_sec_per_step"] for r in rows) * 1e3
        out.append(
            f"| {label} | {calls:.2f} | {mb:.1f} | {med} ms | {rng} | {vs:.2f}x | {paired:.2f}x | {cpu:.1f} ms | "
            f"{no_sync_goal(rows, mine, k)} |"
        )
    return out


def no_sync_goal(rows: list[dict[str, Any]], runs: list[dict[str, Any]], k: int) -> str:
    """For surge with no_sync: are its allreduces k-fold fewer than when syncing every micro-batch?"""
    first = rows[0]
    if first["contestant"] != "surge" or not first["no_sync"]:
        return ""
    every = [r["allreduces_per_step"] for r in runs if r["contestant"] == "surge" and not r["no_sync"]]
    if not every:
        return ""
    fewer = statistics.median(every) / statistics.median(r["allreduces_per_step"] for r in rows)
    return f"{k}x fewer allreduces than syncing every micro-batch: {'PASS' if fewer > k - 0.5 else 'FAIL'} ({fewer:.2f}x)"


def setup_line(m: dict[str, Any]) -> str:
    """One sentence on what was measured, where and under which load."""
    ran = []
    if "throughput" in m["only"]:
        ran.append(
            f"{m['repeats']} throughput repeats of {m['steps']} timed steps (after a {m['warmup']}-step warm-up fit)"
        )
    if "accumulate" in m["only"]:
        ran.append(
            f"{m['accum_repeats']} accumulation repeats of {m['accum_steps']} optimizer steps x {m['accumulate']} "
            f"micro-batches (after a {m['accum_warmup']}-step warm-up fit)"
        )
    return (
        f"Measured {m['date']} on {m['machine']}: Python {m['python']}, torch {m['torch']}, 2 processes x "
        f"torch threads {m['threads']} (OMP_NUM_THREADS=1), gloo over loopback (GLOO_SOCKET_IFNAME=lo); "
        f"{MODELS[m['model']]}, batch 64 per rank; {', '.join(ran)}; load average {m['load_before']} before, "
        f"{m['load_after']} after; took {m['elapsed_s']:.0f} s; surge source hash {m.get('surge_src_sha256', '?')}."
    )


def markdown(report: dict[str, Any]) -> str:
    """The report as markdown: set-up, both tables, the checks."""
    m, runs = report["meta"], report["runs"]
    out = [setup_line(m)]
    table = throughput_table(runs)
    if table:
        out += ["", "Throughput (higher is better):", "", *table, "", ddp_kwargs(runs)]
    table = accumulate_table(runs, m["accumulate"])
    if table:
        out += ["", f"Gradient accumulation, k={m['accumulate']} (time: lower is better):", "", *table]
    out += ["", "Correctness (asserted):", *[f"- {line}" for line in report["checks"]]]
    return "\n".join(out)


def measure(args: argparse.Namespace, env: dict[str, str], tmp: Path) -> dict[str, Any]:
    """All jobs, interleaved by repeat; the report."""
    started, load_before = time.perf_counter(), os.getloadavg()
    runs: list[dict[str, Any]] = []
    for repeat in range(max(args.repeats, args.accum_repeats)):
        plan = [*(THROUGHPUT if repeat < args.repeats and "throughput" in args.only else ())]
        plan += [*(ACCUMULATE if repeat < args.accum_repeats and "accumulate" in args.only else ())]
        for variant in plan:
            runs.append(run_job(variant, args, env, tmp))
            r = runs[-1]
            extra = (
                f"  {r['allreduces_per_step']:.2f} allreduces/step" if variant.bench == "accumulate" else ""
            )
            print(
                f"[{repeat + 1}] {variant.bench:10} {variant.label:34} {r['sec_per_step'] * 1e3:8.2f} ms/step "
                f"{r['samples_per_sec']:7.0f} samples/s{extra}",
                file=sys.stderr,
            )
    checks = check(runs, args)
    return {
        "meta": {
            "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "machine": f"{platform.platform()}, {os.cpu_count()} CPUs",
            "python": platform.python_version(),
            "torch": runs[0]["torch"],
            "threads": runs[0]["threads"],
            "model": args.model,
            "repeats": args.repeats,
            "steps": args.steps,
            "warmup": args.warmup,
            "accum_repeats": args.accum_repeats,
            "accum_steps": args.accum_steps,
            "accum_warmup": args.accum_warmup,
            "accumulate": args.accumulate,
            "only": args.only,
            "load_before": " ".join(f"{x:.2f}" for x in load_before),
            "load_after": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "elapsed_s": time.perf_counter() - started,
        },
        "checks": checks,
        "runs": runs,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5, help="throughput runs per contestant")
    p.add_argument("--steps", type=int, default=300, help="timed optimizer steps per throughput run")
    p.add_argument("--warmup", type=int, default=20, help="steps of the untimed warm-up fit (throughput)")
    p.add_argument("--accum-repeats", type=int, default=3, help="accumulation runs per variant")
    p.add_argument("--accum-steps", type=int, default=40, help="timed optimizer steps per accumulation run")
    p.add_argument("--accum-warmup", type=int, default=5, help="optimizer steps of the accumulation warm-up")
    p.add_argument("--accumulate", type=int, default=4, help="micro-batches per optimizer step")
    p.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads in every process")
    p.add_argument("--only", default="throughput,accumulate", help="comma-separated subset")
    p.add_argument("--out", type=Path, default=RESULTS / "ddp_latest.json")
    args = p.parse_args(argv)
    args.only = [b for b in args.only.split(",") if b]
    if bad := set(args.only) - {"throughput", "accumulate"}:
        p.error(f"unknown {sorted(bad)}; choose from throughput,accumulate")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="surge-ddp-bench-") as tmp:
        fingerprint = snapshot_surge(Path(tmp))
        report = measure(args, job_env(Path(tmp)), Path(tmp))
    report["meta"]["surge_src_sha256"] = fingerprint
    report["meta"]["command"] = " ".join(["python", "benchmarks/ddp.py", *(argv or sys.argv[1:])])
    save_report(report, args.out, "ddp-")
    print(markdown(report))


if __name__ == "__main__":
    try:
        main()
    except BenchmarkError as err:
        sys.exit(f"benchmark failed: {err}")
