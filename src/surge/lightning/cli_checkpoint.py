"""`--ckpt_path` hyper-parameters as the defaults of `--model.*` (LightningCLI's
`load_from_checkpoint_support`): the checkpoint's saved `hyper_parameters` go in front of the
command line as one `--model=<json>` value, so config files and flags given after still win, and
jsonargparse type-checks them as it does any value."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import CheckpointError


def saved_hparams(ckpt_path: str | None) -> dict[str, Any] | None:
    """The `hyper_parameters` of the checkpoint file at `ckpt_path` (safe load, digest checked), or
    None where there are none or the path is not a file ("last", "best": the Trainer resolves them)."""
    if not ckpt_path or not Path(ckpt_path).is_file():
        return None
    from ..checkpoint import load_checkpoint

    saved = load_checkpoint(ckpt_path).get("hyper_parameters")
    if saved is None:
        return None
    if not isinstance(saved, dict):
        raise CheckpointError(
            f"--ckpt_path={ckpt_path}: its 'hyper_parameters' is a {type(saved).__name__}, not a dict "
            "of the model's __init__ arguments; pass load_from_checkpoint_support=False to ignore them."
        )
    return {k: v for k, v in saved.items() if k != "_instantiator"}


def model_flag(
    ckpt_path: str | None, adapt: Callable[[dict[str, Any]], dict[str, Any]], subclass_mode: bool, parsed: Any
) -> tuple[str, dict[str, Any]] | None:
    """`--model=<json>` from the checkpoint's hyper-parameters (after `adapt`), and those; None
    where there are none. In subclass mode they are the `init_args` of the checkpoint's
    `_class_path` if it has one, else of the class parsed from the command line."""
    hparams = saved_hparams(ckpt_path)
    hparams = adapt(hparams) if hparams else hparams
    if not hparams:
        return None
    init_args = {k: v for k, v in hparams.items() if k != "_class_path"}
    value: dict[str, Any] = init_args
    if subclass_mode:
        value = {"class_path": hparams.get("_class_path") or parsed.get("class_path"), "init_args": init_args}
    try:
        return "--model=" + json.dumps(value), hparams
    except (TypeError, ValueError) as err:
        raise CheckpointError(
            f"--ckpt_path={ckpt_path}: the adapted hyper-parameters are not plain data: {err}"
        ) from None


def with_model_flag(args: list[str], command: str | None, flag: str) -> list[str]:
    """`args` with `flag` right after the subcommand (first, without one), before every user value."""
    at = args.index(command) + 1 if command is not None and command in args else 0
    return [*args[:at], flag, *args[at:]]


def refused(ckpt_path: str, hparams: dict[str, Any], err: BaseException) -> CheckpointError:
    return CheckpointError(
        f"--ckpt_path={ckpt_path}: the model hyper-parameters saved in it ({sorted(hparams)}) cannot be "
        f"applied as the defaults of --model: {str(err).strip()}\nThe checkpoint was written by another "
        "model class or version (or holds a value saved as its repr): override LightningCLI."
        "adapt_checkpoint_hparams to adapt them, or pass load_from_checkpoint_support=False."
    )
