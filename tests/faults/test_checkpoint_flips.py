"""A byte-flip sweep over a small checkpoint: every damaged copy either loads exactly what was saved
or raises a CheckpointError naming the file; nothing else (no other error, no silent change).

The test flips every third byte (^0x01 and ^0xFF in turn; about 800 loads, 2-4 s);
`python tests/faults/test_checkpoint_flips.py` flips every byte with both patterns (about 4,900
loads, 8-22 s on a shared 2-core machine) and prints the outcomes and the time taken.
"""

from __future__ import annotations

import collections
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from surge.checkpoint import load_checkpoint, save_atomic  # noqa: E402
from surge.errors import CheckpointError  # noqa: E402

PATTERNS = (0x01, 0xFF)


def small_state() -> dict[str, Any]:
    """What a checkpoint holds, small: tensors of several dtypes and shapes (one of one element),
    nested containers, numbers, strings, None and a bool."""
    return {
        "state_dict": {
            "w": torch.arange(6, dtype=torch.float32).reshape(2, 3),
            "b": torch.tensor([7], dtype=torch.int64),
            "h": torch.tensor([0.5, -2.0], dtype=torch.bfloat16),
        },
        "epoch": 2,
        "loop": {"batches": [1, 2], "name": "fit", "lr": 0.5, "done": False, "seed": None},
        "pair": (3, "x"),
        "surge": {"version": "0.1"},
    }


def same(a: Any, b: Any) -> bool:
    """Equal values and types, tensors bit for bit (dtype, shape, strides, requires_grad)."""
    if isinstance(a, torch.Tensor):
        return (
            type(a) is type(b)
            and (a.dtype, a.shape, a.stride(), a.requires_grad)
            == (b.dtype, b.shape, b.stride(), b.requires_grad)
            and torch.equal(a.view(torch.uint8), b.view(torch.uint8))
        )
    if isinstance(a, dict):
        return type(a) is type(b) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def sweep(folder: Path, flips: list[tuple[int, int]] | None = None) -> tuple[collections.Counter, list[str]]:
    """Outcomes of loading the checkpoint with each (offset, xor mask) flip; all flips by default."""
    good = save_atomic(small_state(), folder / "good.ckpt")
    expected, data = load_checkpoint(good), good.read_bytes()
    flips = flips if flips is not None else [(i, m) for m in PATTERNS for i in range(len(data))]
    path, counts, wrong = folder / "flipped.ckpt", collections.Counter(), []
    for at, mask in flips:
        damaged = bytearray(data)
        damaged[at] ^= mask
        path.write_bytes(damaged)
        outcome = _load(path, expected)
        counts[outcome] += 1
        if outcome not in ("identical", "CheckpointError"):
            wrong.append(f"byte {at} ^0x{mask:02x}: {outcome}")
    return counts, wrong


def _load(path: Path, expected: dict[str, Any]) -> str:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns about a damaged pickle protocol number
            loaded = load_checkpoint(path)
    except CheckpointError as err:
        return "CheckpointError" if str(path) in str(err) else f"CheckpointError without the file: {err}"
    except BaseException as err:  # noqa: BLE001 - any other outcome is the finding
        return f"{type(err).__name__}: {str(err)[:200]}"
    return "identical" if same(loaded, expected) else "loaded different data"


def test_every_flipped_byte_loads_identically_or_is_a_checkpoint_error(tmp_path):
    size = save_atomic(small_state(), tmp_path / "size.ckpt").stat().st_size
    flips = [(i, PATTERNS[i // 3 % 2]) for i in range(0, size, 3)]  # every third byte, both patterns
    counts, wrong = sweep(tmp_path, flips)
    assert wrong == []
    assert counts["CheckpointError"] > len(flips) // 4 and counts["identical"] > 0, counts


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        counts, wrong = sweep(Path(tmp))
        took = time.perf_counter() - start
    print(f"{sum(counts.values())} flips in {took:.1f} s: {dict(counts)}")
    print("\n".join(wrong) or "no other outcome")
    sys.exit(1 if wrong else 0)
