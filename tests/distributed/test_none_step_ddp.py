"""A training_step that returns None on several processes is refused on the rank that returned it (its
backward would be missing from the gradients' allreduce the other ranks wait in), and every rank ends."""

from __future__ import annotations

import sys
import time

from jobs import HERE, PRELOAD, SRC, clean_env

import script_server


def test_a_step_returning_none_on_one_rank_ends_every_rank_with_the_reason(tmp_path):
    env = clean_env({"PYTHONPATH": f"{SRC}:{HERE.parent}"})
    started = time.monotonic()
    proc = script_server.run(
        sys.executable,
        [str(HERE / "none_step_script.py")],
        cwd=tmp_path,
        env=env,
        preload=PRELOAD,
        timeout=120,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "training_step returned None at batch 1" in out and "on 2 processes" in out, out[-3000:]
    assert "SurgeRuntimeError" in out  # a RuntimeError, as Lightning's
    assert "finished" not in out
    assert time.monotonic() - started < 60, out[-3000:]  # ended by the failure, not by a timeout
