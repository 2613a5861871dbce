"""Side by side in lockstep: every contestant's steps timed next to each other's, one at a time.

    python benchmarks/lockstep.py --workloads mlp,mlp_log --sets 5 --rounds 30
    python benchmarks/lockstep.py --contestants raw,raw_aa,surge,lightning,fabric --python-for lightning=$L ...

`run.py` times one whole fit per process, and the contestants' fits follow each other seconds
apart. On a shared VM the machine's speed swings within a fraction of a second (the same loop's
epoch took 512 to 927 µs per step from one second to the next), so run.py's A/A control often
discards nearly every repeat. Here every contestant runs in its own fresh process
(`lockstep_child.py`), all at once, but only one of them runs at any moment: each pauses every
`--block` batches until this conductor lets it run one block. A round lets every contestant run one
block, in an order shuffled anew each round, so a round's blocks are timed within tens of
milliseconds of each other.

A round whose A/A control (`raw_aa`'s block time over `raw`'s) lies outside 0.97-1.03 is discarded
for all contestants. A contestant's speed in a round is the mean of the two raw block times over its
own block time (higher is better, as in the issue's tables). A set's result is the median of its
kept rounds' speeds; its total time against raw's over the kept rounds is shown beside it (epoch
ends included). The first `--warmup-rounds` rounds of a set are not counted.

One set of processes is not enough: the same contestant's speed moved by 3 points from one set to
the next (each process has its own memory layout), so every workload runs `--sets` sets of fresh
processes, and the result is the median of the sets'. Every contestant must train alike: the same
number of optimizer steps and the raw loop's final held-out loss (the checks of `run.py`). Prints a
markdown table; writes benchmarks/results/lockstep.json (and a dated copy in results/raw/).

`--cpu N` keeps every process on CPU N: without it a woken contestant may start on the other core,
away from its cached data. The same hour, 3 sets of 20 rounds kept 59 of 60 rounds of mlp_accum
pinned and 42 unpinned (mlp_log: 40 and 39).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import run
import workloads

BENCH = Path(__file__).resolve().parent
DEFAULT_CONTESTANTS = ("raw", "raw_aa", "surge", "surge_defaults")
# The goals: the hand-written loop's time over the contestant's (higher is better).
GOALS = {
    ("mlp", "surge"): 0.97, ("mlp_accum", "surge"): 0.97, ("mlp_wide", "surge"): 0.97,
    ("mlp_log", "surge"): 0.95, ("cnn", "surge"): 0.99,
    ("mlp", "surge_defaults"): 0.92, ("mlp_log", "surge_defaults"): 0.92,
}  # fmt: skip


@dataclass
class Contestant:
    """One contestant's process, the pipes that pace it, and its block times."""

    name: str
    proc: subprocess.Popen[bytes]
    go: int  # the write end of the pipe it reads a go byte from
    report: IO[str]  # the read end of the pipe it writes each block's times to
    stdout: Path
    stderr: Path
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def next_line(self) -> str:
        line = self.report.readline()
        if not line:
            code = self.proc.wait()
            tail = "\n".join(self.stderr.read_text().strip().splitlines()[-20:])
            raise run.BenchmarkError(f"{self.name} ended early (exit {code}):\n{tail}")
        return line

    def run_block(self) -> None:
        """Let it run one block; keep the times it reports."""
        os.write(self.go, b"g")
        wall, cpu = self.next_line().split()
        self.wall.append(float(wall))
        self.cpu.append(float(cpu))


def block_of(workload: str, args: argparse.Namespace) -> int:
    """Batches per block: `--block`, or one epoch of `workload` (0)."""
    return args.block or workloads.TRAINING[workload].batches_per_epoch


def start(
    workload: str, name: str, blocks: int, args: argparse.Namespace, env: dict[str, str], tmp: Path
) -> Contestant:
    """Start `name`'s process; it warms up and stops at its first block's first batch."""
    go_read, go_write = os.pipe()
    report_read, report_write = os.pipe()
    stdout, stderr = tmp / f"{workload}-{name}.out", tmp / f"{workload}-{name}.err"
    cmd = [
        run.python_for(name, args), str(BENCH / "lockstep_child.py"), "--workload", workload,
        "--contestant", name, "--blocks", str(blocks), "--block", str(block_of(workload, args)),
        "--warmup", str(args.warmup),
        "--go", str(go_read), "--report", str(report_write),
    ]  # fmt: skip
    with stdout.open("wb") as out, stderr.open("wb") as err:
        proc = subprocess.Popen(
            cmd, env=env, cwd=run.ROOT, stdout=out, stderr=err, pass_fds=(go_read, report_write)
        )
    os.close(go_read)
    os.close(report_write)
    return Contestant(name, proc, go_write, os.fdopen(report_read), stdout, stderr)


def measure_workload(
    workload: str, names: list[str], args: argparse.Namespace, env: dict[str, str], tmp: Path, seed: int
) -> dict[str, Any]:
    """All rounds of one workload in one set of fresh processes; every contestant's block times and
    result line (`seed`: the order of the contestants in each round)."""
    blocks = args.warmup_rounds + args.rounds
    contestants = [start(workload, name, blocks, args, env, tmp) for name in names]
    try:
        for c in contestants:
            if (line := c.next_line().strip()) != "ready":
                raise run.BenchmarkError(f"{c.name} said {line!r} instead of ready")
        order = random.Random(seed)
        for _ in range(blocks):
            for c in order.sample(contestants, len(contestants)):
                c.run_block()
        for c in contestants:
            os.write(c.go, b"g")  # the one step after the last timed block
        results = {}
        for c in contestants:
            if (code := c.proc.wait()) != 0:
                raise run.BenchmarkError(f"{c.name} exited with {code}:\n{c.stderr.read_text()[-3000:]}")
            results[c.name] = json.loads(c.stdout.read_text().strip().splitlines()[-1])
    finally:
        for c in contestants:
            os.close(c.go)
            c.report.close()
            if c.proc.poll() is None:
                c.proc.kill()
    skip = args.warmup_rounds
    return {
        "results": results,
        "wall": {c.name: c.wall[skip:] for c in contestants},
        "cpu": {c.name: c.cpu[skip:] for c in contestants},
    }


def summarize(measured: dict[str, Any]) -> dict[str, Any]:
    """One set's A/A ratios, its kept rounds, and each contestant's speed over them."""
    wall, cpu = measured["wall"], measured["cpu"]
    steps = measured["results"]["raw"]["steps_per_block"]
    aa = [b / a for a, b in zip(wall["raw"], wall["raw_aa"])]
    low, high = run.AA_BAND
    kept = [i for i, x in enumerate(aa) if low <= x <= high]
    rows = []
    for name in wall:
        speeds = [(wall["raw"][i] + wall["raw_aa"][i]) / 2 / wall[name][i] for i in range(len(aa))]
        row: dict[str, Any] = {
            "contestant": name,
            "speed_all_rounds": statistics.median(speeds),
            "cpu_per_wall": sum(cpu[name]) / sum(wall[name]),
            # a cross-check needing no pairing: raw's fast blocks against the contestant's
            "speed_p10": quantile(wall["raw"], 0.1) / quantile(wall[name], 0.1),
        }
        if kept:
            mine = sorted(speeds[i] for i in kept)
            q = statistics.quantiles(mine, n=4) if len(mine) > 1 else [mine[0]] * 3
            ref = sum(wall["raw"][i] + wall["raw_aa"][i] for i in kept) / 2
            row |= {
                "speed": statistics.median(mine),
                "speed_total": ref / sum(wall[name][i] for i in kept),
                "speed_q1": q[0],
                "speed_q3": q[2],
                "us_per_step": statistics.median(wall[name][i] for i in kept) / steps * 1e6,
                "cpu_us_per_step": statistics.median(cpu[name][i] for i in kept) / steps * 1e6,
            }
        rows.append(row)
    return {"aa": aa, "kept": len(kept), "rows": rows}


def quantile(values: list[float], q: float) -> float:
    """The `q` quantile of `values` (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def steal_ticks() -> tuple[int, int]:
    """(steal, all) CPU ticks since boot, from /proc/stat (0, 1 where it is missing)."""
    try:
        ticks = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return 0, 1
    return (ticks[7] if len(ticks) > 7 else 0), sum(ticks)


def combine(workload: str, sets: list[dict[str, Any]]) -> dict[str, Any]:
    """Each contestant over the sets of processes: the median of the sets' results, and each set's."""
    rows = []
    for i, first in enumerate(sets[0]["rows"]):
        mine = [s["rows"][i] for s in sets]
        timed = [r for r in mine if "speed" in r]
        row: dict[str, Any] = {
            "contestant": first["contestant"],
            "per_set": [r.get("speed") for r in mine],
            "speed_all_rounds": statistics.median(r["speed_all_rounds"] for r in mine),
            "speed_p10": statistics.median(r["speed_p10"] for r in mine),
            "cpu_per_wall": statistics.median(r["cpu_per_wall"] for r in mine),
        }
        if timed:
            row |= {key: statistics.median(r[key] for r in timed)
                    for key in ("speed", "speed_total", "us_per_step", "cpu_us_per_step")}  # fmt: skip
            if (goal := GOALS.get((workload, row["contestant"]))) is not None:
                row["goal"], row["meets_goal"] = goal, row["speed"] >= goal
        rows.append(row)
    return {"aa": [statistics.median(s["aa"]) for s in sets], "kept": [s["kept"] for s in sets], "rows": rows}


def markdown(report: dict[str, Any]) -> str:
    m = report["meta"]
    out = [
        f"Measured {m['date']} on {m['machine']}: Python {m['python']}, torch {m['torch']}, 1 torch "
        f"thread; {m['sets']} sets of fresh processes, each {m['rounds']} rounds after "
        f"{m['warmup_rounds']} warm-up round(s), one block ({m['block']}) per contestant per round; load "
        f"average {m['load_before']} before, {m['load_after']} after; CPU time stolen by the hypervisor "
        f"{m['steal_pct']:.1f}%; took {m['elapsed_s']:.0f} s"
        + (f"; every process on CPU {m['cpu']} only." if m.get("cpu") is not None else "."),
        "",
        "| workload | contestant | speed vs raw | each set | total time vs raw | all rounds | fastest 10% | "
        "µs/step | CPU µs/step | CPU/wall | host reads/step | goal |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    low, high = run.AA_BAND
    for workload, s in report["workloads"].items():
        out.insert(
            1,
            f"A/A control, {workload}: raw_aa/raw median {', '.join(f'{x:.3f}' for x in s['aa'])} over "
            f"each set's {m['rounds']} rounds; {', '.join(map(str, s['kept']))} rounds inside {low}-{high} kept.",
        )
        results = report["results"][workload]
        for row in s["rows"]:
            reads = statistics.median(r[row["contestant"]]["host_reads_per_step"] for r in results)
            each = ", ".join("–" if x is None else f"{x:.3f}" for x in row["per_set"])
            if "speed" not in row:
                out.append(f"| {workload} | {row['contestant']} | no round kept | {each} | | "
                           f"{row['speed_all_rounds']:.3f} | {row['speed_p10']:.3f} | | | "
                           f"{row['cpu_per_wall']:.2f} | {reads:.2f} | |")  # fmt: skip
                continue
            goal = f">= {row['goal']}: {'PASS' if row['meets_goal'] else 'FAIL'}" if "goal" in row else ""
            out.append(
                f"| {workload} | {row['contestant']} | {row['speed']:.3f} | {each} | {row['speed_total']:.3f} | "
                f"{row['speed_all_rounds']:.3f} | {row['speed_p10']:.3f} | {row['us_per_step']:.0f} | {row['cpu_us_per_step']:.0f} | "
                f"{row['cpu_per_wall']:.2f} | {reads:.2f} | {goal} |"
            )
    out += [
        "",
        "Each set: the median, over its kept rounds, of the mean of the round's two raw block times "
        "over the contestant's block time. Speed vs raw: the median of the sets' (the goal applies to "
        "it). Total time vs raw: the two raw totals' mean over the contestant's total, over a set's kept "
        "rounds (epoch ends and rare pauses included), median of the sets. All rounds: the speed's median "
        "without the A/A rule, median of the sets. Fastest 10%: raw's "
        "10th-percentile block time over the contestant's, all rounds, median of the sets. µs/step: "
        "wall time per optimizer step, median over the kept rounds. Host reads: `Tensor.item`, "
        "`tolist`, `__float__`, `__int__`, `__bool__` calls per step.",
    ]
    for name, note in report["skipped"].items():
        out += ["", f"Skipped {name}: {note}"]
    out += ["", "Correctness (asserted):", *[f"- {line}" for line in report["checks"]]]
    return "\n".join(out)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default="mlp,mlp_accum,mlp_log,mlp_wide,cnn",
                   help=f"comma-separated subset of {','.join(workloads.TRAINING)}")  # fmt: skip
    p.add_argument("--contestants", default=",".join(DEFAULT_CONTESTANTS),
                   help=f"comma-separated; raw and raw_aa always run; from {','.join(run.CONTESTANTS + run.OPTIONAL)}")  # fmt: skip
    p.add_argument("--sets", type=int, default=5,
                   help="sets of fresh processes per workload (each process's memory layout is its own)")  # fmt: skip
    p.add_argument(
        "--rounds", type=int, default=30, help="timed rounds per set (one block per contestant each)"
    )
    p.add_argument("--block", type=int, default=0,
                   help="batches per block (0: one epoch); a multiple of every workload's accumulation")  # fmt: skip
    p.add_argument("--warmup-rounds", type=int, default=2, help="rounds run first and not counted")
    p.add_argument("--warmup", type=int, default=50, help="optimizer steps of each child's warm-up fit")
    p.add_argument("--seed", type=int, default=0, help="seeds the order of the contestants in each round")
    p.add_argument("--python-for", action="append", default=[], metavar="CONTESTANT=PYTHON",
                   help="run a contestant under another interpreter with the same torch (repeat for each)")  # fmt: skip
    p.add_argument("--cpu", type=int, default=None, metavar="N",
                   help="run the conductor and every contestant on CPU N only (the children inherit it)")  # fmt: skip
    p.add_argument("--out", type=Path, default=run.RESULTS / "lockstep.json")
    args = p.parse_args(argv)
    if args.cpu is not None and args.cpu not in os.sched_getaffinity(0):
        p.error(
            f"--cpu {args.cpu}: this process may run on CPUs {sorted(os.sched_getaffinity(0))}; pick one of them"
        )
    args.workloads = [w for w in args.workloads.split(",") if w]
    args.contestants = [
        *run.CONTROLS,
        *(c for c in args.contestants.split(",") if c and c not in run.CONTROLS),
    ]
    for value, allowed, flag in ((args.workloads, tuple(workloads.TRAINING), "--workloads"),
                                 (args.contestants, run.CONTESTANTS + run.OPTIONAL, "--contestants")):  # fmt: skip
        if bad := sorted(set(value) - set(allowed)):
            p.error(f"{flag}: unknown {bad}; choose from {','.join(allowed)}")
    if args.block < 0 or any(args.block % workloads.TRAINING[w].accumulate for w in args.workloads):
        p.error(f"--block {args.block}: give 0 (one epoch) or a positive multiple of every workload's "
                "accumulation (4 in mlp_accum), e.g. --block 100")  # fmt: skip
    if args.sets < 1 or args.rounds < 1 or args.warmup_rounds < 0:
        p.error(f"--sets {args.sets} --rounds {args.rounds} --warmup-rounds {args.warmup_rounds}: "
                "need at least 1 set and 1 round, and no negative warm-up")  # fmt: skip
    if bad := [item for item in args.python_for if "=" not in item]:
        p.error(
            f"--python-for {bad[0]!r}: write CONTESTANT=PYTHON, e.g. lightning=~/.cache/surge/lightning-2.6.6/bin/python"
        )
    args.python_for = dict(item.split("=", 1) for item in args.python_for)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.cpu is not None:  # a contestant woken on the other core would find its caches cold there
        os.sched_setaffinity(0, {args.cpu})
    started, load_before, steal_before = time.perf_counter(), os.getloadavg(), steal_ticks()
    report: dict[str, Any] = {"workloads": {}, "results": {}, "checks": []}
    with tempfile.TemporaryDirectory(prefix="surge-lockstep-") as tmp_name:
        tmp = Path(tmp_name)
        fingerprint = run.snapshot_surge(tmp)
        env = run.child_env(tmp)
        versions, report["skipped"] = run.available(args.contestants, env, args)
        if "raw_aa" not in versions:
            raise run.BenchmarkError(f"the A/A control cannot run: {report['skipped']['raw_aa']}")
        for workload in args.workloads:
            sets = []
            for i in range(args.sets):
                measured = measure_workload(workload, list(versions), args, env, tmp, seed=args.seed + i)
                results = list(measured["results"].values())
                checks = run.check(results, results[0]["steps"])
                sets.append(summarize(measured))
                report["results"].setdefault(workload, []).append(measured["results"])
                report.setdefault("blocks", {}).setdefault(workload, []).append(
                    {"wall": measured["wall"], "cpu": measured["cpu"]}
                )
                print(f"{workload}: set {i + 1}/{args.sets} done", file=sys.stderr)
            report["checks"] += checks  # (every set's were asserted; the last one's line stands for all)
            report["workloads"][workload] = combine(workload, sets)
    steal_after = steal_ticks()
    report["meta"] = {
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": f"{platform.platform()}, {os.cpu_count()} CPUs",
        "python": platform.python_version(),
        "torch": versions["raw"].split()[0],
        "sets": args.sets,
        "rounds": args.rounds,
        "warmup_rounds": args.warmup_rounds,
        "block": f"{args.block} batches" if args.block else "one epoch",
        "cpu": args.cpu,
        "load_before": " ".join(f"{x:.2f}" for x in load_before),
        "load_after": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "steal_pct": 100 * (steal_after[0] - steal_before[0]) / max(steal_after[1] - steal_before[1], 1),
        "elapsed_s": time.perf_counter() - started,
        "versions": versions,
        "surge_src_sha256": fingerprint,
        "command": " ".join([Path(sys.executable).name, "benchmarks/lockstep.py", *(argv or sys.argv[1:])]),
    }
    run.save_report(report, args.out, "lockstep-")
    print(markdown(report))


if __name__ == "__main__":
    try:
        main()
    except run.BenchmarkError as err:
        sys.exit(f"benchmark failed: {err}")
