"""The commands whose arguments the top level only names: their one-line help, and `surge export`'s
arguments (the work itself is imported when the command runs)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

COMMANDS = {  # parsed by jsonargparse in stage_cli/config.py
    "fit": "train the model (resume with --ckpt_path)",
    "validate": "run validation_step over the validation data (weights from --ckpt_path)",
    "test": "run test_step over the test data (weights from --ckpt_path)",
    "predict": "run predict_step over the predict data (weights from --ckpt_path)",
}


def add_export_command(sub: Any) -> None:
    """Register `surge export CKPT --to FILE` on the `surge` command's subparsers."""
    cmd = sub.add_parser("export", help="write a checkpoint's bare model weights to a .safetensors file")
    cmd.add_argument("ckpt", help="a surge checkpoint (.ckpt)")
    cmd.add_argument("--to", required=True, metavar="FILE", help="the .safetensors file to write")
    cmd.add_argument(
        "--module",
        metavar="NAME",
        help="export only this submodule (a dotted attribute name, e.g. model), its keys without the prefix: "
        "a Hugging Face model kept as self.model then loads with from_pretrained",
    )
    cmd.set_defaults(fn=_export_command)


def _export_command(args: argparse.Namespace) -> int:
    from ..checkpoint.export import export_safetensors
    from ..errors import SurgeError
    from ..rank_zero import info

    try:
        path = export_safetensors(args.ckpt, args.to, module=args.module)
    except (SurgeError, ImportError, OSError) as err:
        sys.stderr.write(
            f"surge export: error: {err}\n"
        )  # a command's error goes to stderr, as argparse's do
        return 1
    info(f"wrote {path}")
    return 0
