"""The module a Lightning-mode script's `__main__` names as its spec, so that the processes
`multiprocessing` starts by "spawn" or "forkserver" (DataLoader workers; the default start method on
macOS and Windows) run in the mode too.

Such a process re-imports the parent's main module by that name as `__mp_main__`: run so, this
module installs the Lightning finder and executes the script (its path in `$SURGE_LIGHTNING_SCRIPT`)
in its own namespace, which becomes the child's `__main__`; the classes pickled as `__main__.X`
are found there. Imported any other way it does nothing.
"""

from __future__ import annotations

import os

if __name__ == "__mp_main__":  # a spawned or forkserver child re-importing the parent's main module
    from surge.lightning.mode import SCRIPT_VARIABLE, install, script_code

    install()
    __file__ = os.environ[SCRIPT_VARIABLE]
    exec(script_code(__file__), globals())
