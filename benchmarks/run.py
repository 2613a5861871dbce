"""Benchmark surge against a hand-written PyTorch loop and Lightning: `python benchmarks/run.py`.

Every run is its own fresh subprocess (`child.py`), and contestants are interleaved
(raw, surge, surge_defaults, ..., raw_aa, then again) so drifting machine load hits them alike.
`raw_aa` is the raw loop again, the A/A control. Each repeat runs `raw` first and `raw_aa` last, so
the control brackets every contestant's run; the contestants between them rotate from repeat to
repeat (none always runs right after raw). A repeat of a workload whose raw_aa/raw time ratio falls
outside AA_BAND says the machine was not steady enough to tell a few percent apart, and all of that
repeat's runs of that workload are discarded (counted in the report). Prints a
markdown table and writes benchmarks/results/latest.json (plus a dated copy in results/raw/, not committed).
Fails loudly if the contestants did not train alike: equal step counts, the loss fell, and the
same final held-out loss as the raw loop (same weights, same data, same order).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"
CONTESTANTS = ("raw", "raw_aa", "surge", "surge_defaults", "lightning", "fabric", "accelerate")
CONTROLS = ("raw", "raw_aa")  # always run
AA_BAND = (0.97, 1.03)  # raw_aa / raw time per step (or samples/s) a repeat must fall in to count
OPTIONAL = ("surge_compiled", "surge_spikeguard")  # run only when named in --contestants
TRAINING = ("mlp", "mlp_accum", "cnn", "mlp_log", "mlp_wide", "blocks")
WORKLOADS = (*TRAINING, "import", "rss")
IMPORTS = {
    "raw": "torch", "raw_aa": "torch", "surge": "surge", "surge_defaults": "surge", "lightning": "lightning",
    "fabric": "lightning.fabric", "accelerate": "accelerate", **dict.fromkeys(OPTIONAL, "surge"),
}  # fmt: skip
LOSS_RTOL = 1e-4  # final held-out loss vs the raw loop's
# Compiled kernels reorder floating-point sums: after hundreds of steps the loss agrees to this.
LOSS_RTOL_COMPILED = 1e-2


@dataclass(frozen=True)
class Metric:
    """How a workload's rows are read, and surge's goal on it."""

    name: str
    unit: str
    higher_is_better: bool
    compare: str  # "ratio" (value / raw) or "delta" (value - raw)
    goal: float  # the bound on surge's ratio or delta

    def vs_raw(self, value: float, raw: float) -> float:
        return value / raw if self.compare == "ratio" else value - raw

    def meets(self, versus: float) -> bool:
        return (
            versus >= self.goal if self.higher_is_better and self.compare == "ratio" else versus <= self.goal
        )

    def fmt_vs(self, versus: float) -> str:
        return f"{versus:.3f}x" if self.compare == "ratio" else f"{versus:+.{self.digits}f} {self.unit}"

    def fmt_goal(self) -> str:
        op = ">=" if self.higher_is_better and self.compare == "ratio" else "<="
        return f"{op} {self.goal}x" if self.compare == "ratio" else f"<= +{self.goal} {self.unit}"

    @property
    def digits(self) -> int:
        return 2 if self.unit == "s" else 0


METRICS = {
    "mlp": Metric("time per step", "µs", False, "ratio", 1.05),
    "mlp_accum": Metric("time per optimizer step", "µs", False, "ratio", 1.05),
    "cnn": Metric("throughput", "samples/s", True, "ratio", 0.98),
    "mlp_log": Metric("time per step", "µs", False, "ratio", 1.10),
    "mlp_wide": Metric("time per step", "µs", False, "ratio", 1.05),
    "blocks": Metric("time per step", "µs", False, "ratio", 1.05),
    "import": Metric("import wall time", "s", False, "delta", 0.25),
    "rss": Metric("peak RSS of the cnn run", "MB", False, "delta", 50),
}


class BenchmarkError(RuntimeError):
    """A run failed or the contestants did not train alike."""


def snapshot_surge(into: Path) -> str:
    """Copy this checkout's src/surge into `into`, so edits during a run cannot mix versions.

    Its bytecode is compiled once here, as pip compiles an installed package's: under
    PYTHONDONTWRITEBYTECODE every child would otherwise compile surge from source again.
    Returns a hash of the copied sources, for the record.
    """
    shutil.copytree(ROOT / "src" / "surge", into / "surge", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(into / "surge")], check=True)
    digest = hashlib.sha256()
    for path in sorted((into / "surge").rglob("*.py")):
        digest.update(str(path.relative_to(into)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def child_env(surge_parent: Path) -> dict[str, str]:
    """The environment of every child: the surge snapshot first on the path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(surge_parent), env.get("PYTHONPATH")) if p)
    env["PYTHONHASHSEED"] = "0"
    return env


def python_for(contestant: str, args: argparse.Namespace) -> str:
    """The interpreter a contestant runs under (`--python-for`, e.g. a venv with Lightning)."""
    return str(args.python_for.get(contestant, sys.executable))


def available(
    contestants: list[str], env: dict[str, str], args: argparse.Namespace
) -> tuple[dict[str, str], dict[str, str]]:
    """The contestants that can run here with their versions, and a note for each one skipped."""
    surge_needs = "m.Trainer, m.Module, m.callbacks.ProgressBar; "
    needs = {"raw": "", "raw_aa": "", "surge": surge_needs, "surge_defaults": surge_needs,
             "lightning": "m.Trainer; ", "fabric": "m.Fabric; ", "accelerate": "m.Accelerator; ",
             "surge_compiled": surge_needs, "surge_spikeguard": surge_needs + "m.callbacks.SpikeGuard; "}  # fmt: skip
    versions, skipped = {}, {}
    for name in contestants:
        version = "getattr(m, '__version__', None) or __import__(m.__name__.split('.')[0]).__version__"
        code = f"import torch, {IMPORTS[name]} as m; {needs[name]}print({version}, m.__file__, torch.__version__)"
        proc = subprocess.run([python_for(name, args), "-c", code], env=env, capture_output=True, text=True)
        if proc.returncode == 0:
            versions[name] = proc.stdout.strip()
        else:
            last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            skipped[name] = f"`{code}` failed: {last}"
    if "raw" not in versions:
        raise BenchmarkError(f"the raw contestant cannot run: {skipped['raw']}")
    return versions, skipped


def run_child(
    workload: str, contestant: str, args: argparse.Namespace, env: dict[str, str]
) -> dict[str, Any]:
    """One training run in a fresh process; its JSON result line."""
    cmd = [
        python_for(contestant, args),
        str(BENCH / "child.py"),
        "--workload",
        workload,
        "--contestant",
        contestant,
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--threads",
        str(args.threads),
    ]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = "\n".join(proc.stderr.strip().splitlines()[-30:])
        raise BenchmarkError(f"{' '.join(cmd)} exited with {proc.returncode}:\n{tail}")
    return json.loads(lines[-1])  # progress bars may write to stdout; the result is the last line


# What a training script imports to use each contestant (`import surge` alone imports no torch: its
# names load on first use, so it would be timed against nothing).
IMPORT_STATEMENTS = {
    "raw": "import torch", "raw_aa": "import torch", "lightning": "from lightning import Trainer",
    "fabric": "from lightning.fabric import Fabric", "accelerate": "from accelerate import Accelerator",
    **dict.fromkeys(("surge", "surge_defaults", *OPTIONAL), "from surge import Trainer, Module"),
}  # fmt: skip


def time_import(contestant: str, env: dict[str, str], args: argparse.Namespace) -> float:
    """Wall time of `python -c "<IMPORT_STATEMENTS[contestant]>"` in a fresh process."""
    cmd = [python_for(contestant, args), "-c", IMPORT_STATEMENTS[contestant]]
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise BenchmarkError(f"{' '.join(cmd)} exited with {proc.returncode}:\n{proc.stderr.strip()}")
    return seconds


def check(runs: list[dict[str, Any]], steps: int) -> list[str]:
    """Assert the contestants trained alike; the lines of the report that say what was checked."""
    problems, lines, threads = [], [], {r["threads"] for r in runs}
    if len(threads) != 1:
        problems.append(f"contestants ran with different torch thread counts: {sorted(threads)}")
    if len(torches := {r["torch"] for r in runs}) != 1:
        problems.append(f"contestants ran on different torch builds: {sorted(torches)}")
    for workload in dict.fromkeys(r["workload"] for r in runs):
        mine = [r for r in runs if r["workload"] == workload]
        raw_after = statistics.median(r["loss_after"] for r in mine if r["contestant"] == "raw")
        for r in mine:
            who = f"{workload}/{r['contestant']}"
            if r["steps"] != steps:
                problems.append(f"{who} took {r['steps']} optimizer steps, not {steps}")
            if not r["loss_after"] < r["loss_before"]:
                problems.append(
                    f"{who}: the held-out loss did not fall ({r['loss_before']:.4f} -> {r['loss_after']:.4f})"
                )
            rtol = LOSS_RTOL_COMPILED if r["contestant"] in OPTIONAL else LOSS_RTOL
            if abs(r["loss_after"] - raw_after) > rtol * abs(raw_after):
                problems.append(
                    f"{who}: final held-out loss {r['loss_after']:.6f} differs from raw's {raw_after:.6f} "
                    f"(rtol {rtol})"
                )
        lines.append(
            f"{workload}: {len(mine)} runs, each {steps} optimizer steps; held-out loss "
            f"{mine[0]['loss_before']:.4f} -> {raw_after:.4f} in every run (rtol {LOSS_RTOL}; "
            f"{LOSS_RTOL_COMPILED} for a compiled contestant)"
        )
    if problems:
        raise BenchmarkError("correctness checks failed:\n  " + "\n  ".join(problems))
    return lines


def summarize(values: dict[str, list[float]], metric: Metric) -> list[dict[str, Any]]:
    """Median, range and comparison with raw, per contestant.

    `vs_raw` compares medians; `paired` is the median over repeats of the comparison with the raw
    run of the same repeat (adjacent in time, so less exposed to drifting load).
    """
    raw = values["raw"]
    rows = []
    for name, vals in values.items():
        med = statistics.median(vals)
        row = {
            "contestant": name,
            "median": med,
            "min": min(vals),
            "max": max(vals),
            "n": len(vals),
            "vs_raw": metric.vs_raw(med, statistics.median(raw)),
            "paired": statistics.median(metric.vs_raw(v, r) for v, r in zip(vals, raw)),
        }
        if name == "surge":
            row["goal"], row["meets_goal"] = metric.fmt_goal(), metric.meets(row["vs_raw"])
        rows.append(row)
    return rows


def bracketed(contestants: list[str], repeat: int) -> list[str]:
    """One repeat's order: `raw` first and `raw_aa` last (the A/A control spans every other run),
    the others between them rotated by `repeat`."""
    middle = [c for c in contestants if c not in CONTROLS]
    k = repeat % len(middle) if middle else 0
    return ["raw", *middle[k:], *middle[:k], "raw_aa"]


def steady_repeats(runs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, list[float]]]:
    """The runs of the repeats whose A/A control fell inside AA_BAND, and each workload's A/A
    ratios (raw_aa / raw time per step, one per repeat) for the report."""
    ratios: dict[str, list[float]] = {}
    kept = []
    for workload in dict.fromkeys(r["workload"] for r in runs):
        by_repeat: dict[int, dict[str, dict[str, Any]]] = {}
        for r in runs:
            if r["workload"] == workload:
                by_repeat.setdefault(r["repeat"], {})[r["contestant"]] = r
        for repeat in by_repeat.values():
            aa = repeat["raw_aa"]["sec_per_step"] / repeat["raw"]["sec_per_step"]
            ratios.setdefault(workload, []).append(aa)
            for r in repeat.values():
                r["kept"] = AA_BAND[0] <= aa <= AA_BAND[1]
            if AA_BAND[0] <= aa <= AA_BAND[1]:
                kept += repeat.values()
    return kept, ratios


def collect(
    workload: str, runs: list[dict[str, Any]], imports: dict[str, list[float]]
) -> dict[str, list[float]]:
    """Each contestant's values of `workload`'s metric, one per repeat."""
    if workload == "import":
        return imports
    source = "cnn" if workload == "rss" else workload
    field = {
        "mlp": "sec_per_step",
        "mlp_accum": "sec_per_step",
        "mlp_log": "sec_per_step",
        "mlp_wide": "sec_per_step",
        "blocks": "sec_per_step",
        "cnn": "samples_per_sec",
        "rss": "peak_rss_mb",
    }[workload]
    scale = 1e6 if field == "sec_per_step" else 1.0
    values: dict[str, list[float]] = {}
    for r in runs:
        if r["workload"] == source:
            values.setdefault(r["contestant"], []).append(r[field] * scale)
    return values


def extras(runs: list[dict[str, Any]], workload: str, contestant: str) -> tuple[str, str]:
    """Median CPU time per step, and median `.item()` / all host reads per timed fit ("–" if none)."""
    mine = [
        r for r in runs if r["workload"] == workload and r["contestant"] == contestant and r.get("kept", True)
    ]
    if not mine or workload not in TRAINING:
        return "–", "–"
    cpu = statistics.median(r["cpu_sec_per_step"] for r in mine) * 1e6
    items = statistics.median(r["item_calls"] for r in mine)
    reads = statistics.median(r["host_reads"] for r in mine)
    return f"{cpu:.0f} µs", f"{items:.0f} / {reads:.0f}"


def markdown(report: dict[str, Any]) -> str:
    """The report as markdown: set-up, the table, skipped contestants and the checks."""
    m = report["meta"]
    out = [
        f"Measured {m['date']} on {m['machine']}: Python {m['python']}, torch {m['torch']}, "
        f"torch threads {m['threads']}, {m['repeats']} repeats, {m['steps']} timed steps after a "
        f"{m['warmup']}-step warm-up fit, import timed {m['import_repeats']}x; load average "
        f"{m['load_before']} before, {m['load_after']} after; took {m['elapsed_s']:.0f} s.",
        "",
        "| workload | metric | contestant | median | min–max | vs raw | paired | CPU time/step | "
        "`.item()` / all host reads | surge goal |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    runs = report["runs"]
    low, high = report["aa_band"]
    for workload, ratios in report["aa_ratios"].items():
        inside = sum(low <= x <= high for x in ratios)
        listed = ", ".join(f"{x:.3f}" for x in ratios)
        out.insert(
            1,
            f"A/A control, {workload}: raw_aa/raw {listed}; {inside} of {len(ratios)} repeats inside "
            f"{low}-{high} kept, {len(ratios) - inside} discarded."
            + (" No steady repeat: no result." if not inside else ""),
        )
    for workload, rows in report["summary"].items():
        metric = METRICS[workload]
        label = f"{metric.name} ({'higher' if metric.higher_is_better else 'lower'} is better)"
        d = metric.digits
        for row in rows:
            goal = f"{row['goal']}: {'PASS' if row['meets_goal'] else 'FAIL'}" if "goal" in row else ""
            cpu, reads = extras(runs, workload, row["contestant"])
            out.append(
                f"| {workload} | {label} | {row['contestant']} | {row['median']:.{d}f} {metric.unit} | "
                f"{row['min']:.{d}f}–{row['max']:.{d}f} | {metric.fmt_vs(row['vs_raw'])} | {metric.fmt_vs(row['paired'])} | "
                f"{cpu} | {reads} | {goal} |"
            )
    out += [
        "",
        "vs raw: ratio (or difference) of the medians; paired: median over repeats of the same "
        "comparison with the raw run of that repeat; CPU time/step: process CPU time (median), less "
        "sensitive to other load; host reads: `Tensor.item`, `tolist`, `__float__`, `__int__`, `__bool__` "
        "calls during the timed fit.",
    ]
    out += compile_lines(runs)
    for name, note in report["skipped"].items():
        out += ["", f"Skipped {name}: {note}"]
    if report["checks"]:
        out += ["", "Correctness (asserted):", *[f"- {line}" for line in report["checks"]]]
    return "\n".join(out)


def compile_lines(runs: list[dict[str, Any]]) -> list[str]:
    """The compiled contestant's compile time per workload (kept out of its step time)."""
    times: dict[str, list[float]] = {}
    for r in runs:
        if r["contestant"] in OPTIONAL:
            times.setdefault(r["workload"], []).append(r.get("compile_seconds", 0.0))
    if not times:
        return []
    listed = ", ".join(f"{w} {statistics.median(t):.1f} s" for w, t in times.items())
    return ["", f"Compile time of surge_compiled (median per run, not in its step time): {listed}."]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5, help="runs per contestant per training workload")
    p.add_argument("--steps", type=int, default=500, help="timed optimizer steps per run")
    p.add_argument("--warmup", type=int, default=50, help="steps of the untimed warm-up fit in each run")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch.set_num_threads in every child (0: torch's default); see README",
    )
    p.add_argument("--import-repeats", type=int, default=15, help="timed imports per contestant")
    p.add_argument(
        "--only", default=",".join(WORKLOADS), help=f"comma-separated subset of {','.join(WORKLOADS)}"
    )
    p.add_argument(
        "--contestants",
        default=",".join(CONTESTANTS),
        help=f"comma-separated; raw is always run; also {','.join(OPTIONAL)} (compile='step'; SpikeGuard())",
    )
    p.add_argument(
        "--python-for",
        action="append",
        default=[],
        metavar="CONTESTANT=PYTHON",
        help="run a contestant under another interpreter with the same torch, e.g. "
        "lightning=~/.cache/surge/lightning-2.6.6/bin/python (repeat for each)",
    )
    p.add_argument("--out", type=Path, default=RESULTS / "latest.json")
    args = p.parse_args(argv)
    args.only = [w for w in args.only.split(",") if w]
    args.contestants = [*CONTROLS, *(c for c in args.contestants.split(",") if c and c not in CONTROLS)]
    args.python_for = dict(item.split("=", 1) for item in args.python_for)
    for value, allowed in ((args.only, WORKLOADS), (args.contestants, (*CONTESTANTS, *OPTIONAL))):
        if bad := set(value) - set(allowed):
            p.error(f"unknown {sorted(bad)}; choose from {','.join(allowed)}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="surge-bench-") as tmp:
        fingerprint = snapshot_surge(Path(tmp))
        report = measure(args, child_env(Path(tmp)))
    report["meta"]["surge_src_sha256"] = fingerprint
    report["meta"]["command"] = " ".join(
        [Path(sys.executable).name, "benchmarks/run.py", *(argv or sys.argv[1:])]
    )
    save_report(report, args.out)
    print(markdown(report))


def save_report(report: dict[str, Any], out: Path, prefix: str = "") -> None:
    """Write `report` to `out`, and a copy named `<prefix><date>.json` into results/raw/ beside it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    dated = out.parent / "raw" / f"{prefix}{report['meta']['date'].replace(':', '')}.json"
    dated.parent.mkdir(exist_ok=True)
    dated.write_text(out.read_text())


def measure(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    """All the runs, interleaved, then the checks; the report."""
    started, load_before = time.perf_counter(), os.getloadavg()
    versions, skipped = available(args.contestants, env, args)
    contestants = list(versions)
    training = [w for w in TRAINING if w in args.only or (w == "cnn" and "rss" in args.only)]
    runs: list[dict[str, Any]] = []
    for repeat in range(args.repeats):
        for workload in training:
            for contestant in bracketed(contestants, repeat):
                runs.append({**run_child(workload, contestant, args, env), "repeat": repeat})
                r = runs[-1]
                print(
                    f"[{repeat + 1}/{args.repeats}] {workload:8} {contestant:9} "
                    f"{r['sec_per_step'] * 1e6:9.1f} µs/step  {r['samples_per_sec']:8.0f} samples/s",
                    file=sys.stderr,
                )
    imports: dict[str, list[float]] = {c: [] for c in contestants}
    kept, aa = steady_repeats(runs)
    if "import" in args.only:
        # surge's bytecode cached, as an installed package's is (pip compiles it; an interpreter run
        # with PYTHONDONTWRITEBYTECODE would otherwise recompile every changed module, each time)
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "src")], check=True)
        for _ in range(args.import_repeats):
            for contestant in contestants:
                imports[contestant].append(time_import(contestant, env, args))
        print(
            "import: " + ", ".join(f"{c} {statistics.median(v):.2f} s" for c, v in imports.items()),
            file=sys.stderr,
        )
    checks = check(runs, args.steps) if runs else []
    return {
        "meta": {
            "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "machine": f"{platform.platform()}, {os.cpu_count()} CPUs",
            "python": platform.python_version(),
            "torch": versions["raw"].split()[0],
            "threads": runs[0]["threads"] if runs else args.threads,
            "repeats": args.repeats,
            "steps": args.steps,
            "warmup": args.warmup,
            "import_repeats": args.import_repeats,
            "load_before": " ".join(f"{x:.2f}" for x in load_before),
            "load_after": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "elapsed_s": time.perf_counter() - started,
            "versions": versions,
        },
        "skipped": skipped,
        "checks": checks,
        "summary": {
            w: summarize(values, METRICS[w])
            for w in WORKLOADS
            if w in args.only and (values := collect(w, kept, imports)).get("raw")
        },
        "aa_band": AA_BAND,
        "aa_ratios": aa,
        "runs": runs,
        "imports": imports,
    }


if __name__ == "__main__":
    try:
        main()
    except BenchmarkError as err:
        sys.exit(f"benchmark failed: {err}")
