"""`python -m surge.lightning train.py [args]`: run an unmodified Lightning script on surge."""

from __future__ import annotations

import sys

from ..errors import MisconfigurationError
from .mode import run_script


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(
            "usage: python -m surge.lightning SCRIPT [ARGS...]   (or: surge run SCRIPT [ARGS...])\n"
        )
        return 0 if argv else 2
    try:
        run_script(argv[0], argv[1:])
    except MisconfigurationError as err:  # the script is not there; its own errors keep their traceback
        if not str(err).startswith("surge run:"):
            raise
        sys.stderr.write(f"{err}\n")
        return 2
    return 0


if __name__ == "__main__":
    from ..stage_cli.error_report import errors_shown_briefly

    raise SystemExit(errors_shown_briefly(main))
