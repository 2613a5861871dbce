"""What starting surge costs: `import surge`, `from surge import Trainer, Module`, `surge --help` and a config mistake
against `import torch`, each in a fresh interpreter.

    python benchmarks/import_time.py --repeats 30
    python benchmarks/import_time.py --repeats 15 --names-only --before /path/to/other/checkout/src

Every case runs in its own subprocess of this one, interleaved (torch, surge, surge's names,
--help, torch, ...), so a change in the machine's load falls on all of them alike; the report gives
each case's median and quartiles of wall time, its median CPU time (user + system, which a busy
machine moves less), each minus torch's, and the load average before and after. surge is imported from this checkout's `src/` (first on `PYTHONPATH`).
`--before SRC` adds the names' import from another checkout's `src/` (a commit to compare with),
interleaved with the others; `--names-only` keeps `import torch`, the names, the names after torch's due
collector pass, and a short torch training script run with and without importing the names first
(what they add to a script that trains: torch's import leaves a full pass of the garbage collector
due, and whichever code runs next pays it, the names in `python -c` or the script's own first
steps; run at once after torch's import, that pass no longer falls in the names' time). The script also runs
ending in `os._exit`: the difference from its full run is the interpreter's teardown, whose garbage
collector passes and module clearing grow with every object a process holds, surge's included.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
CASES = {
    "import torch": ["-c", "import torch"],
    "import surge": ["-c", "import surge"],
    "from surge import Trainer, Module": ["-c", "from surge import Module, Trainer"],
    "surge --help": ["-m", "surge", "--help"],
    # a misspelt Trainer argument: answered by the early check, and by the full parse it precedes
    "surge fit, a config mistake": ["-m", "surge", "fit", "--config", "{bad}"],
    "the same, full parse only": [
        "-c",
        "from surge.stage_cli.config import run_cli; run_cli(['fit', '--config', '{bad}'])",
    ],
    # where the names' cost goes: without the garbage collector, and without the interpreter's teardown
    "import torch, gc disabled": ["-c", "import gc; gc.disable(); import torch"],
    "from surge import ..., gc disabled": [
        "-c",
        "import gc; gc.disable(); from surge import Module, Trainer",
    ],
    # torch's import leaves the collector near a full pass: about 11,000 objects made next set it off
    # (11,072 dicts on Python 3.11.7; a pass over all of torch's objects); surge's names make about 12,900
    "import torch, then 20,000 dicts": ["-c", "import torch; keep = [dict() for _ in range(20000)]"],
    # surge's names apart from that pass: torch's import, its due pass run at once, then the names
    # (the young and middle passes the names' own objects bring on still count)
    "import torch, then its due pass": ["-c", "import gc, torch; gc.collect()"],
    "the same, then surge's names": [
        "-c",
        "import gc, torch; gc.collect(); from surge import Module, Trainer",
    ],
    "import torch, os._exit": ["-c", "import os, torch; os._exit(0)"],
    "from surge import ..., os._exit": ["-c", "import os; from surge import Module, Trainer; os._exit(0)"],
    # what the names add to a script that trains: the pass above falls in the script either way
    "a torch script": ["{script}"],
    "the same script, importing surge's names first": ["{script}", "--names"],
    # the same two without the interpreter's teardown: what the names add before the script's end, and so at its exit
    "a torch script, ending in os._exit": ["{script}", "--exit"],
    "the same script, names first, ending in os._exit": ["{script}", "--names", "--exit"],
}
# A hand-written training script: a model, AdamW, a loader and 32 steps. With --names it first imports
# surge's names, as a script that trains with surge does, and nothing else changes; with --exit it
# leaves by os._exit, skipping the interpreter's teardown.
SCRIPT = """\
import os
import sys

if "--names" in sys.argv:
    from surge import Module, Trainer  # noqa: F401
import torch
from torch import nn

torch.set_num_threads(1)
net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
opt = torch.optim.AdamW(net.parameters())
data = torch.utils.data.TensorDataset(torch.randn(256, 32), torch.randint(0, 10, (256,)))
for x, y in torch.utils.data.DataLoader(data, batch_size=8):
    opt.zero_grad()
    nn.functional.cross_entropy(net(x), y).backward()
    opt.step()
if "--exit" in sys.argv:
    os._exit(0)
"""


# (without surge, with surge's names): the differences the report gives, paired run by run
PAIRS = (
    ("import torch", "from surge import Trainer, Module"),
    ("import torch, then its due pass", "the same, then surge's names"),
    ("a torch script", "the same script, importing surge's names first"),
    ("a torch script, ending in os._exit", "the same script, names first, ending in os._exit"),
)


def timed(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one fresh interpreter; CPU (user + system) moves less with the load."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # a config mistake exits 2 by design; any other status is a broken case
    done = subprocess.run([sys.executable, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if done.returncode not in (0, 2):
        raise SystemExit(f"{args} failed:\n{done.stderr.decode()}")
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, q2, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else (values[0],) * 3
    return q1, q2, q3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30, help="timed runs of each case")
    parser.add_argument("--before", type=Path, help="another checkout's src/: its names' import, compared")
    parser.add_argument("--names-only", action="store_true", help="only `import torch` and the names")
    args = parser.parse_args()
    bad = Path(tempfile.mkdtemp()) / "bad.yaml"
    bad.write_text("model: {class_path: surge.demo.DigitsCNN}\ntrainer: {max_epoch: 2}\n")
    script = bad.with_name("torch_script.py")
    script.write_text(SCRIPT)
    names = "from surge import Trainer, Module"
    kept = ("import torch", names, *PAIRS[1], *PAIRS[2], *PAIRS[3])
    chosen = {k: v for k, v in CASES.items() if not args.names_only or k in kept}
    cases = {name: ([a.format(bad=bad, script=script) for a in case], SRC) for name, case in chosen.items()}
    if args.before is not None:
        cases[f"{names}, before"] = (CASES[names], args.before.resolve())
    for _, src in cases.values():
        # surge's bytecode cached, as an installed package's is (pip compiles it; an interpreter run
        # with PYTHONDONTWRITEBYTECODE would otherwise recompile every changed module, each time)
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], check=True)
    envs = {
        src: {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")])}
        for _, src in cases.values()
    }
    for case, src in cases.values():  # warm the file cache; untimed
        timed(case, envs[src])
    load_before = os.getloadavg()
    walls: dict[str, list[float]] = {name: [] for name in cases}
    cpus: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.repeats):
        for name, (case, src) in cases.items():
            took, cpu = timed(case, envs[src])
            walls[name].append(took)
            cpus[name].append(cpu)
    load_after = os.getloadavg()
    torch_wall, torch_cpu = statistics.median(walls["import torch"]), statistics.median(cpus["import torch"])
    print(
        f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{args.repeats} runs of each case, interleaved; load average "
        f"{' '.join(f'{x:.2f}' for x in load_before)} before, {' '.join(f'{x:.2f}' for x in load_after)} after\n"
    )
    print(
        "| case | wall, median | wall, quartiles | wall - import torch | CPU, median | CPU - import torch |"
    )
    print("|---|---|---|---|---|---|")
    for name in cases:
        q1, q2, q3 = quartiles(walls[name])
        cpu = statistics.median(cpus[name])
        print(
            f"| `{name}` | {q2:.3f} s | {q1:.3f}-{q3:.3f} s | {q2 - torch_wall:+.3f} s "
            f"| {cpu:.3f} s | {cpu - torch_cpu:+.3f} s |"
        )
    print()
    for plain, with_surge in PAIRS:
        if plain in walls and with_surge in walls:
            paired = statistics.median(b - a for a, b in zip(walls[plain], walls[with_surge], strict=True))
            print(f"- `{with_surge}` - `{plain}`, paired median: {paired:+.3f} s")


if __name__ == "__main__":
    main()
