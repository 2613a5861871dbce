"""What a checkpoint that cannot be used says besides the problem: the next step. A missing file
lists the checkpoints that exist nearby; an unreadable one names `ckpt_path="auto"` (the newest
that reads); weights that do not fit the model show where the hyper-parameters differ."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import CheckpointError, MisconfigurationError, did_you_mean

_LISTED = 5  # checkpoints named in a message at most


def missing_file(ckpt_path: str | Path, nearby: Sequence[Path]) -> MisconfigurationError:
    """`ckpt_path` is no file: the checkpoints found beside it and under the run's folders."""
    names = [str(p) for p in nearby]
    message = f"ckpt_path={str(ckpt_path)!r} is not valid: no such file{did_you_mean(str(ckpt_path), names)}."
    if not nearby:
        return MisconfigurationError(
            f"{message} No checkpoint (*.ckpt) exists beside it or under the run's folder."
        )
    listed = "\n".join(f"  {name}" for name in names[:_LISTED])
    more = f"\n  ... and {len(names) - _LISTED} more" if len(names) > _LISTED else ""
    return MisconfigurationError(
        f"{message} Checkpoints nearby, newest first:\n{listed}{more}\n"
        'Pass one of them, or ckpt_path="last" (the newest) or "auto" (the newest that reads; none: start fresh).'
    )


def unreadable(err: CheckpointError, others: Sequence[Path]) -> CheckpointError:
    """`err` (a checkpoint that does not read) with the way on: "auto" resumes from the newest that does."""
    newest = f" (the newest here is {others[0]})" if others else ""
    return CheckpointError(
        f'{err}. ckpt_path="auto" resumes from the newest checkpoint that reads, skipping broken ones{newest}.'
    )


def mismatched(
    err: CheckpointError, ckpt: Mapping[str, Any], hparams: Mapping[str, Any], model: str
) -> CheckpointError:
    """Weights that do not fit `model`: the hyper-parameters it was saved with next to the model's."""
    saved = ckpt.get("hyper_parameters")
    if not isinstance(saved, Mapping) or not (saved or hparams):
        return err
    differ = [
        f"{key}: checkpoint {saved.get(key, '(unset)')!r}, model {hparams.get(key, '(unset)')!r}"
        for key in sorted({*saved, *hparams}, key=str)
        if saved.get(key, _UNSET) != hparams.get(key, _UNSET)
    ]
    if not differ:
        return CheckpointError(
            f"{err}. Its hyper-parameters are the model's ({dict(saved)}): the model's code changed since it was saved."
        )
    return CheckpointError(
        f"{err}. The hyper-parameters differ: {'; '.join(differ)}. Build the model with the checkpoint's values "
        f"to resume it (`{model}.load_from_checkpoint(path)` reads them from the file)."
    )


_UNSET = object()
