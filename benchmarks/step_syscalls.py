"""System calls per training step, counted with strace: what a loop asks of the kernel, on any machine.

    python benchmarks/step_syscalls.py --workloads mlp_log --contestants raw,surge,surge_defaults

Instruction counts (`step_instructions.py`) miss the kernel: a thread that wakes to write a file
costs the training thread the interpreter's lock, and each hand-over of that lock is a `futex` call.
Here each contestant (`child.py`'s builders) runs under `strace -f -c` twice, in fresh processes:
a warm-up fit and a fit of `--short` optimizer steps, then the same with `--long` steps. The
difference of the two counts, divided by the difference in steps, is what one step asks of the
kernel; the process's start, torch's import and the fit's fixed costs cancel out. All threads of the
process are counted (`-f`). Counts, not times: a busy machine gives the same figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import child
import workloads

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
# The fit run under strace: warm up, then a fit of `steps` optimizer steps.
FIT = """
import logging, sys
sys.path.insert(0, {bench!r})
import torch, child, workloads
torch.set_num_threads(1)
logging.disable(logging.INFO)
fit, _ = child.BUILDERS[{contestant!r}]({workload!r}, 20)
fit()
workloads.seed_everything()
fit, _ = child.BUILDERS[{contestant!r}]({workload!r}, {steps})
fit()
"""


def syscalls(workload: str, contestant: str, steps: int, tmp: Path) -> dict[str, int]:
    """Each system call's count over a whole process that warms up and fits `steps` steps."""
    out = tmp / f"{workload}-{contestant}-{steps}.txt"
    code = FIT.format(bench=str(BENCH), contestant=contestant, workload=workload, steps=steps)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.run(
        ["strace", "-f", "-c", "-o", str(out), sys.executable, "-c", code],
        env=env, cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode != 0:
        sys.exit(f"{contestant} on {workload} failed under strace:\n{proc.stderr[-3000:]}")
    counts = {}
    for line in out.read_text().splitlines():
        parts = line.split()
        # "% time  seconds  usecs/call  calls  [errors]  syscall": the calls column is the 4th
        if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
            counts[parts[-1]] = int(parts[3])
    return counts


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--workloads", default="mlp,mlp_log", help=f"comma-separated, from {','.join(workloads.TRAINING)}"
    )
    p.add_argument(
        "--contestants", default="raw,surge,surge_defaults", help=f"from {','.join(child.CONTESTANTS)}"
    )
    p.add_argument("--short", type=int, default=1000, help="optimizer steps of the shorter fit")
    p.add_argument("--long", type=int, default=6000, help="optimizer steps of the longer fit")
    p.add_argument(
        "--show", type=int, default=6, help="system calls listed per contestant, most frequent first"
    )
    args = p.parse_args(argv)
    names, loads = args.contestants.split(","), args.workloads.split(",")
    if bad := sorted({*names} - {*child.CONTESTANTS} | {*loads} - {*workloads.TRAINING}):
        p.error(
            f"unknown {bad}: choose contestants from {','.join(child.CONTESTANTS)} and workloads from {','.join(workloads.TRAINING)}"
        )
    if not 0 < args.short < args.long:
        p.error(
            f"--short {args.short} --long {args.long}: need 0 < short < long (the difference is what is counted)"
        )
    if shutil.which("strace") is None:
        sys.exit("strace is not installed: apt-get install strace (the counts come from strace -f -c)")
    span = args.long - args.short
    print(
        f"System calls per optimizer step, all threads ((fit of {args.long} - fit of {args.short}) / {span}):\n"
    )
    print("| workload | contestant | all | futex | most frequent |")
    print("|---|---|---:|---:|---|")
    with tempfile.TemporaryDirectory(prefix="surge-syscalls-") as tmp:
        for workload in loads:
            for name in names:
                short, long = (syscalls(workload, name, n, Path(tmp)) for n in (args.short, args.long))
                per_step = {k: (long.get(k, 0) - short.get(k, 0)) / span for k in long.keys() | short.keys()}
                top = sorted((v, k) for k, v in per_step.items() if v > 0)[::-1][: args.show]
                listed = ", ".join(f"{k} {v:.3f}" for v, k in top) or "none"
                total = sum(per_step.values())
                print(
                    f"| {workload} | {name} | {total:.3f} | {per_step.get('futex', 0.0):.3f} | {listed} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
