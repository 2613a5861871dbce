"""What an oracle script records, the same way under Lightning and under surge: values put under
keys, state dicts saved for `torch.equal`, written to `$ORACLE_DIR/record.json` at exit (rank zero,
or per rank as `record-rank{N}.json` when `record.PER_RANK` is set)."""

from __future__ import annotations

import atexit
import enum
import json
import math
import os
from pathlib import Path
from typing import Any

import torch

DIR = Path(os.environ.get("ORACLE_DIR", "."))
FRAMEWORK = os.environ.get("ORACLE_FRAMEWORK", "unknown")
PER_RANK = False  # a script sets it to write each rank's record (record-rank{N}.json)
_record: dict[str, Any] = {}


def plain(value: Any) -> Any:
    """A JSON-able copy: tensors become numbers or lists (exact: floats by their repr)."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        return plain(value.item() if value.numel() == 1 else value.tolist())
    if isinstance(value, float):
        return repr(value) if not math.isfinite(value) else value
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    return repr(value)


def put(key: str, value: Any) -> None:
    _record[key] = plain(value)


def append(key: str, value: Any) -> None:
    _record.setdefault(key, []).append(plain(value))


def metrics(trainer: Any) -> dict[str, Any]:
    """`trainer.callback_metrics` as plain numbers, keys sorted."""
    return {k: plain(v) for k, v in sorted(trainer.callback_metrics.items())}


def weights(name: str, module: torch.nn.Module) -> None:
    rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")))
    if rank == 0:
        (DIR / "weights").mkdir(parents=True, exist_ok=True)
        torch.save(
            {k: v.detach().cpu() for k, v in module.state_dict().items()}, DIR / "weights" / f"{name}.pt"
        )


@atexit.register
def _write() -> None:
    rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")))
    if _record and PER_RANK:
        (DIR / f"record-rank{rank}.json").write_text(json.dumps(_record, indent=1, sort_keys=True))
    elif _record and rank == 0:
        (DIR / "record.json").write_text(json.dumps(_record, indent=1, sort_keys=True))


def shape(value: Any) -> Any:
    """A hook argument as something both frameworks can be compared on: tensors by shape, the
    Trainer and the Module by role, optimizers and schedulers by class, checkpoints by top-level keys."""
    if isinstance(value, torch.Tensor):
        return f"Tensor{list(value.shape)}"
    if isinstance(value, enum.Enum):  # a str enum (a setup's TrainerFn) by its type too
        return f"{type(value).__name__}:{value.value}"
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, dict):
        if "state_dict" in value or "pytorch-lightning_version" in value:
            append("checkpoint_keys", sorted(str(k) for k in value))  # compared on their own
            return "checkpoint"
        return {str(k): shape(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [shape(v) for v in value]
    if isinstance(value, torch.device):
        return f"device:{value.type}"
    return _role(value)


def _role(value: Any) -> str:
    kind = type(value)
    names = {c.__name__ for c in kind.__mro__}
    if "Trainer" in names:
        return "trainer"
    if "LightningModule" in names or "Module" in names and hasattr(value, "training_step"):
        return "module"
    if isinstance(value, torch.optim.Optimizer):  # by the torch class it is (a wrapper: "wrapped")
        torch_class = next(c for c in kind.__mro__ if c.__module__.startswith("torch.optim"))
        return f"optimizer:{torch_class.__name__}" + (":wrapped" if torch_class is not kind else "")
    if "LightningOptimizer" in names:
        return "LightningOptimizer"
    if callable(value):
        return "callable"
    return kind.__name__


def call(key: str, name: str, *args: Any, **kwargs: Any) -> None:
    """Append one hook call to the list under `key`: its name and its arguments, `shape`d."""
    entry: dict[str, Any] = {"name": name}
    if args:
        entry["args"] = [shape(a) for a in args]
    if kwargs:
        entry["kwargs"] = {k: shape(v) for k, v in sorted(kwargs.items())}
    _record.setdefault(key, []).append(entry)
