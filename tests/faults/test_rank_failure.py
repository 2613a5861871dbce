"""One rank raising ends the whole job: no hang, a non-zero exit, no processes left.

What ends a job is asserted by what its ranks said (the failing rank's error, the watchdog's
message, no collective timing out), not by how long it took: a busy machine slows a job, it does not
change why the job ended. The jobs' ranks are forked from a server that imported torch and surge
(tests/harness/script_server.py); a rank a launcher left behind keeps its stand-in process, which
names the job's script and folder, alive.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import psutil
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "distributed"))
from jobs import PRELOAD, TRAIN_SCRIPT, clean_env  # noqa: E402

import script_server  # noqa: E402

# A job that hangs instead of ending is stopped here and fails the test; the jobs end in seconds, a
# hang lasts for the collective timeout (30 minutes by default).
HUNG = 300


def _job(tmp_path, *args):
    argv = [str(TRAIN_SCRIPT), "--devices", "2", "--root", str(tmp_path), "--out", str(tmp_path / "out.pt"),
            *args]  # fmt: skip
    return script_server.run(
        sys.executable, argv, cwd=tmp_path, env=clean_env(), preload=PRELOAD, timeout=HUNG
    )


def _ranks_left(before, tmp_path):
    """This job's ranks still running (its command names tmp_path: other tests' jobs may run beside it)."""
    time.sleep(0.5)
    return [
        p for p in psutil.process_iter(["pid", "cmdline"])
        if p.info["pid"] not in before and str(TRAIN_SCRIPT) in " ".join(p.info["cmdline"] or [])
        and str(tmp_path) in (p.info["cmdline"] or [])
    ]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_one_rank_raising_ends_every_rank(tmp_path, rank):
    before = {p.pid for p in psutil.process_iter()}
    proc = _job(tmp_path, "--epochs", "50", "--fail-rank", str(rank), "--fail-step", "3")
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-2000:]
    assert output.count(f"RuntimeError: boom on rank {rank} at step 3") == 1, output[-3000:]
    assert "process group timeout" not in output, output[-3000:]  # stopped for the failure, not timed out
    assert not _ranks_left(before, tmp_path), "orphaned ranks"
    assert not (tmp_path / "out.pt").exists()


@pytest.mark.slow
def test_a_hung_rank_hits_the_collective_timeout_and_is_stopped(tmp_path):
    before = {p.pid for p in psutil.process_iter()}
    started = time.monotonic()
    proc = _job(tmp_path, "--epochs", "50", "--hang-rank", "1", "--fail-step", "3", "--timeout", "10")
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert time.monotonic() - started >= 10  # the timeout's wait: a lower bound, whatever the load
    assert "rank 0 waited more than the process group timeout (10 s)" in output, output[-3000:]
    assert "rank 1 stopped answering" in output
    assert not _ranks_left(before, tmp_path), "the hung rank was left running"


@pytest.mark.slow
def test_a_nan_on_one_rank_stops_every_rank_before_the_step(tmp_path):
    before = {p.pid for p in psutil.process_iter()}
    proc = _job(tmp_path, "--epochs", "5", "--poison-rank", "1", "--fail-step", "4", "--nonfinite", "raise")
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    # The NaN reaches every rank through the gradient allreduce, so every rank (rank 0 computed no
    # NaN itself) stops at that step, before applying it; whichever reports first ends the job.
    pattern = r"\[rank[01]\]: surge.optim.nonfinite.NonFiniteError: non-finite loss or gradients at step 4"
    assert re.search(pattern, output), output[-3000:]
    assert not _ranks_left(before, tmp_path)


@pytest.mark.slow
def test_a_nan_loss_on_one_rank_at_the_epochs_last_step_is_warned_about(tmp_path):
    """Rank 1 alone computes a NaN loss at step 20, the epoch's last: the allreduce ruins every
    rank's weights after it, while rank 0's losses all stayed finite. Rank 1 says so, by rank."""
    proc = _job(tmp_path, "--poison-rank", "1", "--fail-step", "20", "--nonfinite", "warn")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    # (said at the log interval that holds step 20: the script logs every step)
    assert "a non-finite loss was seen on rank 1 between step 19 and 20" in output, output[-3000:]
