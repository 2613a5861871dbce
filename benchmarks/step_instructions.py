"""Instructions per training step, counted: what a step costs each contestant, on any machine.

    python benchmarks/step_instructions.py --workloads mlp,mlp_log,mlp_accum --jobs 2

A timed ratio needs a quiet machine; the CPU executes the same instructions on a busy one. Each
contestant (`child.py`'s builders: the hand-written loop, surge with the benchmark's settings,
surge's defaults) runs in its own process under valgrind's callgrind, with counting off while
Python starts, torch imports and a warm-up fit runs. Counting is on for exactly two fits, of
`--short` and `--long` optimizer steps; their difference divided by the difference in steps is
the cost of one step in instructions, the fit's fixed costs (building the loop, the loggers, the
files it writes at the start and end) cancelling out. A fit that crosses an epoch end pays it
inside that slope, as a real fit does.

Instructions are not time: a cache miss or a slow system call costs time, not instructions. On a
loop whose cost is Python and dispatch, the two follow each other closely; the ratio is the
figure a quiet machine's timing would approach, and it does not move with the load.

Needs `valgrind` (with `callgrind_control`); under it a step runs about 50x slower, so the
defaults keep the fits short.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONTESTANTS = ("raw", "surge", "surge_defaults")


def _callgrind(*flags: str) -> None:
    """`callgrind_control FLAGS` for this process: `-i on|off` switches counting, `-d NAME` dumps it."""
    subprocess.run(["callgrind_control", *flags, str(os.getpid())], check=True, capture_output=True)


def _redraw_every(seconds: float) -> None:
    """Every ProgressBar built from now on redraws every `seconds` unless told otherwise (the
    defaults' bar is built by the Trainer, run.py's by child.py: neither takes a setting from here)."""
    from surge.callbacks.progress import ProgressBar  # noqa: PLC0415 - surge's contestants only

    init = ProgressBar.__init__
    # its defaults start at its first argument after self: refresh_rate
    assert (
        init.__code__.co_varnames[1] == "refresh_rate"
        and len(init.__defaults__) == init.__code__.co_argcount - 1
    )
    init.__defaults__ = (seconds, *init.__defaults__[1:])


def child(
    workload: str, contestant: str, short: int, long: int, warmup: int, bar_refresh: float | None
) -> None:
    """Runs under callgrind: a warm-up fit uncounted, then a counted fit of each length, each dumped
    under its own name (`fit-<steps>`)."""
    sys.path.insert(0, str(HERE))
    import child as builders  # noqa: PLC0415 - the benchmarks' folder, put on the path just above
    import torch  # noqa: PLC0415
    import workloads  # noqa: PLC0415

    if bar_refresh is not None and contestant.startswith("surge"):  # raw's heap stays without surge
        _redraw_every(bar_refresh)
    torch.set_num_threads(1)
    workloads.seed_everything()
    warm, _ = builders.BUILDERS[contestant](workload, warmup)
    warm()
    for steps in (short, long):
        workloads.seed_everything()
        fit, _ = builders.BUILDERS[contestant](workload, steps)
        _callgrind("-i", "on")
        taken = fit()
        _callgrind("-i", "off")
        assert taken == steps, (contestant, workload, taken, steps)
        _callgrind("-d", f"fit-{steps}")  # the counts since the last dump: this fit's alone


def count(workload: str, contestant: str, args: argparse.Namespace, folder: Path) -> float:
    """Instructions per optimizer step of `contestant` on `workload`."""
    out = folder / f"{workload}-{contestant}.out"
    python = os.path.realpath(sys.executable)  # valgrind must start the interpreter, not a shim script
    command = [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
        python, __file__, "--child", workload, contestant,
        "--short", str(args.short), "--long", str(args.long), "--warmup", str(args.warmup),
        *(["--bar-refresh", str(args.bar_refresh)] if args.bar_refresh is not None else []),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.returncode != 0:
        raise SystemExit(f"{workload}/{contestant} failed:\n{done.stderr[-3000:]}")
    totals = {}
    for dump in folder.glob(f"{out.name}.*"):
        text = dump.read_text()
        name = re.search(r"^desc: Trigger: dump fit-(\d+)$", text, re.M)
        if name:
            totals[int(name.group(1))] = int(re.search(r"^totals: (\d+)$", text, re.M).group(1))
    return (totals[args.long] - totals[args.short]) / (args.long - args.short)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="mlp,mlp_log,mlp_accum")
    parser.add_argument("--contestants", default=",".join(CONTESTANTS))
    parser.add_argument("--short", type=int, default=20, help="optimizer steps of the short counted fit")
    parser.add_argument("--long", type=int, default=120, help="optimizer steps of the long counted fit")
    parser.add_argument("--warmup", type=int, default=20, help="optimizer steps of the uncounted warm-up fit")
    parser.add_argument(
        "--jobs", type=int, default=2, help="contestants counted at once (counts do not depend on it)"
    )
    parser.add_argument(
        "--bar-refresh", type=float, default=None, metavar="SECONDS",
        help="the progress bar's redraw interval (default: its own 0.5 s, which callgrind's slowdown makes "
        "about 50x more frequent per step; a large value leaves the redraws out of the count)",
    )  # fmt: skip
    parser.add_argument("--child", nargs=2, metavar=("WORKLOAD", "CONTESTANT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child, args.short, args.long, args.warmup, args.bar_refresh)
        return
    if not (shutil.which("valgrind") and shutil.which("callgrind_control")):
        raise SystemExit("step_instructions.py needs valgrind (apt-get install valgrind)")
    if not 1 <= args.short < args.long:
        raise SystemExit(f"--short ({args.short}) must be at least 1 and less than --long ({args.long})")
    if args.bar_refresh is not None and not args.bar_refresh > 0:
        raise SystemExit(f"--bar-refresh ({args.bar_refresh}) must be seconds > 0 (1e9: no redraw)")
    pairs = [(w, c) for w in args.workloads.split(",") for c in args.contestants.split(",")]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        per_step = dict(zip(pairs, pool.map(lambda p: count(*p, args, Path(tmp)), pairs)))
    import torch  # noqa: PLC0415 - for the record only, after the counted runs

    version = subprocess.run(["valgrind", "--version"], capture_output=True, text=True).stdout.strip()
    bar = f"; progress bar redrawn every {args.bar_refresh:g} s" if args.bar_refresh is not None else ""
    print(
        f"Instructions per optimizer step (callgrind, {version}): slope between counted fits of "
        f"{args.short} and {args.long} steps after a {args.warmup}-step warm-up; Python "
        f"{sys.version.split()[0]}, torch {torch.__version__}, 1 thread{bar}.\n"
    )
    print("| workload | contestant | instructions per step | vs raw | raw's share of it |")
    print("|---|---|---:|---:|---:|")
    for workload, contestant in pairs:
        raw = per_step.get((workload, "raw"))
        mine = per_step[(workload, contestant)]
        ratio = f"{mine / raw:.3f}x" if raw else "-"
        share = f"{raw / mine:.3f}" if raw else "-"
        print(f"| {workload} | {contestant} | {mine / 1e3:,.0f} k | {ratio} | {share} |")


if __name__ == "__main__":
    main()
