"""What the seeded backward saves: the hand-written loop with `(loss / k).backward()` against the same
loop with `SeededBackward` (`src/surge/loops/window_backward.py`), in one process.

    python benchmarks/seeded_backward.py --accumulate 2,3,4,8 --repeats 21

For each k, both loops train the tiny MLP of `workloads.py` one epoch at a time (500 batches, an
optimizer step every k), alternating in a shuffled order after one warm-up epoch each; the report
gives each loop's median CPU time per epoch (`time.process_time`, which other processes move less)
and their ratio. Both start from the same weights and see the same batches, and their weights are
asserted to be the same bits after every epoch: the seed must change nothing but the time. With k
1 the fit loop does not seed (`backward()`'s own seed costs what the copy of a kept one does).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import workloads  # noqa: E402

from surge.loops.window_backward import SeededBackward  # noqa: E402


def loop(k: int, seeded: bool) -> tuple[Callable[[], float], torch.nn.Module]:
    """One epoch of the hand-written loop per call; returns its CPU seconds."""
    workloads.seed_everything()
    net = workloads.build_model("mlp")
    opt = workloads.make_optimizer("mlp", net.parameters())
    loader = workloads.make_loader("mlp")
    backward = SeededBackward()

    def epoch() -> float:
        net.train()
        start = time.process_time()
        for i, batch in enumerate(loader):
            loss = workloads.compute_loss(net, batch)
            if seeded:
                backward.run(loss, k)
            else:
                (loss / k if k != 1 else loss).backward()
            if (i + 1) % k == 0:
                opt.step()
                opt.zero_grad(set_to_none=True)
        return time.process_time() - start

    return epoch, net


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--accumulate", default="2,3,4,8", help="comma-separated micro-batches per optimizer step")
    p.add_argument("--repeats", type=int, default=21, help="epochs timed per loop and k")
    args = p.parse_args()
    ks = [int(k) for k in args.accumulate.split(",")]
    if not ks or min(ks) < 1 or args.repeats < 1:
        p.error(f"--accumulate {args.accumulate} --repeats {args.repeats}: give k >= 1 and at least 1 repeat")
    torch.set_num_threads(1)
    load = os.getloadavg()
    print(
        f"torch {torch.__version__}, 1 thread, {args.repeats} epochs of 500 batches per loop; load average {load[0]:.2f}"
    )
    print("\n| k | divided loss, CPU ms/epoch | seeded backward, CPU ms/epoch | speed, seeded over divided |")
    print("|---:|---:|---:|---:|")
    for k in ks:
        (divided, net_d), (seeded, net_s) = loop(k, False), loop(k, True)
        times: dict[str, list[float]] = {"divided": [], "seeded": []}
        runs = {"divided": divided, "seeded": seeded}
        for repeat in range(args.repeats + 1):
            for name in random.sample(list(runs), 2):
                seconds = runs[name]()
                if repeat:  # the first epoch of each warms up
                    times[name].append(seconds)
            assert all(torch.equal(a, b) for a, b in zip(net_d.parameters(), net_s.parameters())), (
                f"k={k}: the seeded backward changed the weights"
            )
        d, s = statistics.median(times["divided"]), statistics.median(times["seeded"])
        print(f"| {k} | {d * 1e3:.1f} | {s * 1e3:.1f} | {d / s:.3f} |")
    print(f"\nload average after: {os.getloadavg()[0]:.2f}; weights bit-identical after every epoch")


if __name__ == "__main__":
    main()
