"""What `SpikeGuard` costs per step on the tiny-MLP workload, by part (steadier than whole fits on
a loaded machine, where the fit-to-fit spread is far larger than the guard):

    PYTHONPATH=src python benchmarks/spike_guard_cost.py [--repeats 7] [--every 50]

- `step`: one training step of the `mlp` workload by hand (forward, loss, backward, SGD step,
  zero_grad), the scale the rest is compared with;
- `watch`: `SpikeGuard.watch(loss)`, run on every micro-batch (no device op, nothing read);
- `check`: `SpikeGuard.judge()` over `--every` losses, run every `log_every_n_steps` steps (one
  host read);
- `snapshot`: what a snapshot copies (the module's `state_dict` cloned, the optimizer's state
  deep-copied, the RNG states), run at a check when one is due.

Each is timed over many calls, the median of `--repeats` rounds is printed, and the per-step cost
`watch + (check + snapshot) / every` against `step`.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable

import torch
import workloads

from surge.callbacks import SpikeGuard
from surge.seed import rng_state


def per_call(fn: Callable[[], object], calls: int, repeats: int) -> float:
    """Median over `repeats` rounds of the mean seconds per call over `calls` calls."""
    rounds = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - start) / calls)
    return statistics.median(rounds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--every", type=int, default=50, help="log_every_n_steps: steps between checks")
    args = parser.parse_args()
    torch.set_num_threads(1)
    workloads.seed_everything()
    net = workloads.build_model("mlp")
    opt = workloads.make_optimizer("mlp", net.parameters())
    batches = list(workloads.make_loader("mlp"))[:50]
    i = 0

    def step() -> torch.Tensor:
        nonlocal i
        loss = workloads.compute_loss(net, batches[i % len(batches)])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        i += 1
        return loss

    loss = step()
    guard = SpikeGuard()

    def watch_round() -> None:  # `every` watches, then the check resets the list
        for _ in range(args.every):
            guard.watch(loss)
        guard.pending.clear()

    def check() -> None:
        guard.pending = [loss.detach()] * args.every
        guard.judge()

    def snapshot() -> None:
        {k: v.detach().clone() for k, v in net.state_dict().items()}
        copy.deepcopy(opt.state_dict())
        rng_state()

    t_step = per_call(step, 200, args.repeats)
    t_watch = per_call(watch_round, 200, args.repeats) / args.every
    t_check = per_call(check, 200, args.repeats)
    t_snap = per_call(snapshot, 200, args.repeats)
    extra = t_watch + (t_check + t_snap) / args.every
    print(
        f"| part | µs | runs |\n|---|---:|---|\n| step (forward, backward, SGD) | {t_step * 1e6:.1f} | every step |"
    )
    print(f"| watch | {t_watch * 1e6:.2f} | every micro-batch |")
    print(f"| check over {args.every} losses | {t_check * 1e6:.1f} | every {args.every} steps |")
    print(f"| snapshot | {t_snap * 1e6:.1f} | every {args.every} steps (when due) |")
    print(f"| **per step** | **{extra * 1e6:.2f}** | **{extra / t_step * 100:.2f}% of the step** |")


if __name__ == "__main__":
    main()
