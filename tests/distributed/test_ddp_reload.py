"""reload_dataloaders_every_n_epochs under DDP: each new loader is split between the ranks as fit's
first one is (a DistributedSampler, its epoch set), on 2 real gloo processes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from jobs import PRELOAD, clean_env

import script_server

SCRIPT = Path(__file__).with_name("reload_script.py")


def test_each_reloaded_loader_is_shared_between_the_ranks(tmp_path):
    env = clean_env()  # the environment of the other jobs' servers (tests/harness/script_server.py)
    argv = [str(SCRIPT), "--root", str(tmp_path / "run"), "--out", str(tmp_path)]
    # both ranks are forked from a server that imported torch and surge
    proc = script_server.run(sys.executable, argv, cwd=tmp_path, env=env, preload=PRELOAD, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for epoch, size in enumerate([16, 24, 32]):
        a, b = (r["ids"][str(epoch)] for r in ranks)
        assert len(a) == len(b) == size // 2 and sorted(a + b) == list(range(size))  # each id once
        assert ranks[0]["planned"][str(epoch)] == size // 4  # batches of 2 per rank
    assert ranks[0]["ids"]["2"] != sorted(ranks[0]["ids"]["2"])  # the new loader's shuffle is kept
