"""One unmodified Lightning script (`lightning_script.py`) timed under Lightning and under `surge run`.

    python benchmarks/lightning_mode.py --repeats 5
    python benchmarks/lightning_mode.py --venv /path/to/venv-with-lightning --repeats 3

Every run is a fresh process, alternating: lightning, surge, lightning, surge, ... after one untimed
warm-up pair (file caches). Lightning runs with the venv's python (`<venv>/bin/python
lightning_script.py`); surge with this environment's `python -m surge.lightning lightning_script.py`
and `PYTHONPATH=<this checkout>/src`. Each script times its own training loop (first batch's start
to last batch's end: steps/s, and steps per CPU-second of the process in that span) and `trainer.fit`; the harness times the whole process (wall, and its
CPU time). Both get `OMP_NUM_THREADS=1` and call `torch.set_num_threads(1)`.

Checks (exit status 1 if one fails): every run took the same number of optimizer steps; every run
of a framework ends at the same validation loss; both start from the same weights (same initial
validation loss) and see the same first epoch's order; their final validation losses are within
`--val-rtol` of each other. They are not expected to be equal: after the first epoch the two draw
the shuffling differently from the global RNG (reported as the first labels of each epoch).

Without the venv (or with no `lightning` in it) the harness says so and times surge alone.
Results: benchmarks/results/lightning_mode.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SCRIPT = HERE / "lightning_script.py"
DEFAULT_VENV = (
    Path.home() / ".cache" / "surge" / "lightning-2.6.6"
)  # the oracle's: python tests/oracle/oracle_env.py


def lightning_python(venv: Path) -> tuple[str | None, str]:
    """The venv's python if it imports lightning, else None, with a line saying what was found."""
    python = venv / "bin" / "python"
    if not python.exists():
        return None, f"no venv at {venv} ({python} missing)"
    probe = "import lightning, torch; print(lightning.__version__, torch.__version__)"
    proc = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, env=base_env())
    if proc.returncode != 0:
        return None, f"{python} cannot import lightning: {proc.stderr.strip().splitlines()[-1:]}"
    return str(python), f"lightning {proc.stdout.split()[0]} on torch {proc.stdout.split()[1]} ({python})"


def base_env() -> dict[str, str]:
    env = dict(os.environ)
    for key in ("PYTHONPATH", "PL_GLOBAL_SEED", "PL_SEED_WORKERS"):
        env.pop(key, None)
    env.update(OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
    return env


def command(framework: str, python: str | None, root: Path, epochs: int) -> tuple[list[str], dict[str, str]]:
    args = [str(SCRIPT), "--root", str(root), "--epochs", str(epochs)]
    env = base_env()
    if framework == "lightning":
        return [python, *args], env
    env["PYTHONPATH"] = str(ROOT / "src")
    return [sys.executable, "-m", "surge.lightning", *args], env


def one_run(framework: str, python: str | None, epochs: int) -> dict:
    """Runs the script once in a fresh process and a fresh directory; returns its RESULT plus timings."""
    with tempfile.TemporaryDirectory(prefix=f"lmode-{framework}-") as tmp:
        cmd, env = command(framework, python, Path(tmp) / "run", epochs)
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
        wall = time.perf_counter() - t0
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{framework} run failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if len(lines) != 1:
        raise SystemExit(f"{framework} run printed {len(lines)} RESULT lines:\n{proc.stdout}\n{proc.stderr}")
    result = json.loads(lines[0][len("RESULT ") :])
    if result["framework"] != framework:
        raise SystemExit(f"expected a {framework} Trainer, the script ran {result['framework']}'s")
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    return {**result, "wall_s": wall, "process_cpu_s": cpu, "command": cmd}


def checks(runs: dict[str, list[dict]], val_rtol: float) -> list[tuple[str, bool]]:
    """The correctness checks: (description, passed)."""
    out = []
    steps = {r["global_step"] for rs in runs.values() for r in rs} | {
        r["batches"] for rs in runs.values() for r in rs
    }
    out.append((f"every run took the same number of optimizer steps ({sorted(steps)})", len(steps) == 1))
    for fw, rs in runs.items():
        losses = {r["val_loss"] for r in rs}
        out.append((f"{fw}: every run ends at the same val loss ({len(losses)} distinct)", len(losses) == 1))
        fell = all(r["val_loss"] < 0.5 * r["initial_val_loss"] for r in rs)
        out.append((f"{fw}: val loss fell (to under half its initial value) in every run", fell))
    if len(runs) == 2:
        (la, ra), (lb, rb) = runs.items()
        init = {round(r["initial_val_loss"], 6) for r in ra + rb}
        out.append(
            (f"{la} and {lb} start from the same weights (initial val loss {sorted(init)})", len(init) == 1)
        )
        first = {json.dumps(r["epoch_first_labels"][0]) for r in ra + rb}
        out.append(("the first epoch's shuffled order is the same in both", len(first) == 1))
        a, b = statistics.median(r["val_loss"] for r in ra), statistics.median(r["val_loss"] for r in rb)
        close = abs(a - b) <= val_rtol * max(a, b)
        out.append((f"final val loss close: {la} {a:.4f}, {lb} {b:.4f} (within rtol {val_rtol})", close))
    return out


def spread(values: list[float], fmt: str) -> tuple[str, str]:
    return format(statistics.median(values), fmt), f"{format(min(values), fmt)}–{format(max(values), fmt)}"


def table(runs: dict[str, list[dict]]) -> str:
    head = (
        "| framework | steps/s (median) | min–max | steps per CPU-second | loop time | `trainer.fit` "
        "| process wall time | min–max | process CPU | final val loss |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    rows = [head]
    for fw, rs in runs.items():
        sps, sps_range = spread([r["steps_per_s"] for r in rs], ".0f")
        wall, wall_range = spread([r["wall_s"] for r in rs], ".2f")
        per_cpu = statistics.median(r["batches"] / r["loop_cpu_s"] for r in rs)
        loop = statistics.median(r["loop_s"] for r in rs)
        fit = statistics.median(r["fit_s"] for r in rs)
        cpu = statistics.median(r["process_cpu_s"] for r in rs)
        loss = statistics.median(r["val_loss"] for r in rs)
        label = "surge (`surge run`)" if fw == "surge" else fw
        rows.append(
            f"| {label} | {sps} | {sps_range} | {per_cpu:.0f} | {loop:.2f} s | {fit:.2f} s | {wall} s | {wall_range} s "
            f"| {cpu:.2f} s | {loss:.4f} |"
        )
    if len(runs) == 2:
        lr, sr = runs["lightning"], runs["surge"]
        med = statistics.median

        def ratio(key: str, inverse: bool = False) -> tuple[float, float]:
            overall = med(r[key] for r in sr) / med(r[key] for r in lr)
            paired = med(s[key] / lt[key] for s, lt in zip(sr, lr, strict=True))
            return (1 / overall, 1 / paired) if inverse else (overall, paired)

        for r in lr + sr:
            r["steps_per_cpu_s"] = r["batches"] / r["loop_cpu_s"]
        sps, sps_p = ratio("steps_per_s")
        cpu, cpu_p = ratio("steps_per_cpu_s")
        wall, wall_p = ratio("wall_s", inverse=True)
        fit, fit_p = ratio("fit_s", inverse=True)
        rows.append("")
        rows.append(
            f"surge / Lightning: steps/s **{sps:.2f}x** (paired {sps_p:.2f}x), steps per CPU-second {cpu:.2f}x "
            f"(paired {cpu_p:.2f}x); process wall time: Lightning's "
            f"is {wall:.2f}x surge's (paired {wall_p:.2f}x); `trainer.fit`: {fit:.2f}x (paired {fit_p:.2f}x)."
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs of each framework first")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument(
        "--venv", type=Path, default=DEFAULT_VENV, help="a venv whose python imports lightning"
    )
    parser.add_argument("--val-rtol", type=float, default=0.25)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "lightning_mode.json")
    args = parser.parse_args()

    python, found = lightning_python(args.venv)
    frameworks = ["lightning", "surge"] if python else ["surge"]
    if not python:
        print(f"NOTE: {found}; timing surge alone. To compare, create it: python -m venv --system-site-packages "
              f"{args.venv} && {args.venv}/bin/pip install lightning==2.6.6 -c constraints.txt", flush=True)  # fmt: skip
    load_before = os.getloadavg()
    started = time.time()
    for _ in range(args.warmup):
        for fw in frameworks:
            one_run(fw, python, args.epochs)
    runs: dict[str, list[dict]] = {fw: [] for fw in frameworks}
    for i in range(args.repeats):
        for fw in frameworks:
            r = one_run(fw, python, args.epochs)
            runs[fw].append(r)
            print(f"repeat {i + 1} {fw}: {r['steps_per_s']:.0f} steps/s, process {r['wall_s']:.2f} s, "
                  f"val loss {r['val_loss']:.4f}", flush=True)  # fmt: skip
    load_after = os.getloadavg()
    took = time.time() - started

    import torch

    meta = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": found if python else None,
        "surge_commit": subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "repeats": args.repeats,
        "warmup": args.warmup,
        "epochs": args.epochs,
        "load_before": load_before,
        "load_after": load_after,
        "took_s": took,
    }
    results = checks(runs, args.val_rtol)
    print(
        f"\nMeasured {meta['date']} on {meta['platform']}, {meta['cpus']} CPUs: Python {meta['python']}, "
        f"torch {meta['torch']}, torch threads 1, {found if python else 'no lightning'}, surge {meta['surge_commit']}; "
        f"{args.repeats} repeats after {args.warmup} warm-up run(s) each; load average "
        f"{' '.join(f'{x:.2f}' for x in load_before)} before, {' '.join(f'{x:.2f}' for x in load_after)} after; "
        f"took {took:.0f} s.\n"
    )
    print(table(runs))
    print("\nChecks:")
    for text, ok in results:
        print(f"- {'PASS' if ok else 'FAIL'}: {text}")
    for fw, rs in runs.items():
        print(f"- {fw}: first labels of each epoch {rs[0]['epoch_first_labels']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "checks": results, "runs": runs}, indent=1) + "\n")
    print(f"\nwrote {args.out}")
    if not all(ok for _, ok in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
