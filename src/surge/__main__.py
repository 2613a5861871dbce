"""`python -m surge`: the surge command."""

from .cli import main

raise SystemExit(main())
