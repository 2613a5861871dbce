"""One contestant of `benchmarks/lockstep.py`: a fit that pauses every `--block` batches.

    python benchmarks/lockstep_child.py --workload mlp --contestant surge --blocks 301 --block 20 --go 5 --report 7

It builds the contestant as `child.py` does (`child.BUILDERS`), warms up with a short fit, then
runs one fit of `--blocks` blocks of `--block` batches and one optimizer step more. The loader's
collate function is a `Gate`: at the first batch of every block it writes the wall and CPU seconds
of the block just run to the `--report` descriptor and waits for one byte on `--go`. The conductor
lets one contestant run at a time. A block is timed from its first batch to the next block's first
batch; a block that crosses an epoch's end pays that end (a checkpoint, for surge's defaults) and
the next loader iterator. The fit's start and end are not timed. After the fit it prints a JSON
result line like `child.py`'s (held-out loss before and after, host reads per step, peak RSS).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import child
import torch
import workloads
from torch.utils.data import default_collate


class Gate:
    """The loader's collate function: every `every` batches, report the block just run and wait."""

    def __init__(self, go: int, report: int, every: int) -> None:
        self.go, self.report, self.every = go, report, every
        self.batches = 0
        self.started: tuple[float, float] | None = None  # (perf_counter, process_time) at the last go

    def __call__(self, samples: list[Any]) -> Any:
        if self.batches % self.every == 0:
            self.pause()
        self.batches += 1
        return default_collate(samples)

    def pause(self) -> None:
        """Report the last block's wall and CPU seconds ("ready" before the first), then wait for go."""
        if self.started is None:
            os.write(self.report, b"ready\n")
        else:
            wall, cpu = time.perf_counter() - self.started[0], time.process_time() - self.started[1]
            os.write(self.report, f"{wall!r} {cpu!r}\n".encode())
        if os.read(self.go, 1) != b"g":
            raise SystemExit("lockstep_child: the conductor closed the go pipe before the fit ended")
        self.started = (time.perf_counter(), time.process_time())


def run(
    workload: str, contestant: str, blocks: int, block: int, warmup: int, go: int, report: int
) -> dict[str, Any]:
    """Warm up, then the gated fit of `blocks` blocks of `block` batches and one step more."""
    torch.set_num_threads(1)
    workloads.seed_everything()
    child.count_host_reads()
    build = child.BUILDERS[contestant]
    warm_fit, _ = build(workload, warmup)
    warm_fit()

    spec = workloads.TRAINING[workload]
    steps_per_block = block // spec.accumulate
    steps = blocks * steps_per_block + 1  # the step after the last block ends its timing
    workloads.seed_everything()
    workloads.COLLATE = Gate(go, report, block)
    fit, net = build(workload, steps)
    held_out = workloads.held_out_batch(workload)
    loss_before = workloads.held_out_loss(net, held_out)
    child.host_reads.clear()
    taken = fit()
    reads = dict(child.host_reads)
    return {
        "workload": workload,
        "contestant": contestant,
        "steps": taken,
        "steps_per_block": steps_per_block,
        "loss_before": loss_before,
        "loss_after": workloads.held_out_loss(net, held_out),
        "item_calls_per_step": reads.get("item", 0) / taken,
        "host_reads_per_step": sum(reads.values()) / taken,
        "peak_rss_mb": child.peak_rss_mb(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", choices=sorted(workloads.TRAINING), required=True)
    p.add_argument("--contestant", choices=child.CONTESTANTS, required=True)
    p.add_argument(
        "--blocks", type=int, required=True, help="blocks of the gated fit (warm-up ones included)"
    )
    p.add_argument("--block", type=int, required=True, help="batches per block (a multiple of accumulation)")
    p.add_argument("--warmup", type=int, default=50, help="optimizer steps of the untimed warm-up fit")
    p.add_argument("--go", type=int, required=True, help="descriptor to read each go byte from")
    p.add_argument("--report", type=int, required=True, help="descriptor to write each block's times to")
    a = p.parse_args()
    result = run(a.workload, a.contestant, a.blocks, a.block, a.warmup, a.go, a.report)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
