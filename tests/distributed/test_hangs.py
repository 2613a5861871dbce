"""A hang names its rank: the live rank's error says which rank stopped and which collective it never
entered, and every live rank's stacks are in the run directory's hang/ (docs/long_runs.md).

Two ranks on gloo, a process group timeout of a few seconds: one rank stopped with SIGSTOP mid-epoch
(its heartbeat stops too), one stuck in Python code in training_step (its heartbeat goes on).
"""

from __future__ import annotations

import datetime
import json
import re
import sys
import threading
from pathlib import Path

import pytest
from jobs import HERE, TRAIN_SCRIPT, clean_env, run_group

from surge.errors import MisconfigurationError
from surge.strategies import DDPStrategy, FSDPStrategy
from surge.strategies.hang_dump import write_dump
from surge.strategies.hang_report import judge_peer

TIMEOUT_S = 3.0
SLACK_S = 6.0  # a busy machine: the error comes within the timeout and the dump wait (3 s) plus this


def _job(tmp_path: Path, *args: str) -> tuple[int, str, Path]:
    root = tmp_path / "root"
    cmd = [sys.executable, str(TRAIN_SCRIPT), "--devices", "2", "--root", str(root), "--out", str(tmp_path / "out.pt"),
           "--epochs", "50", "--fail-step", "5", "--timeout", str(TIMEOUT_S), *args]  # fmt: skip
    # run_group kills the whole process group at the end: the stopped rank (SIGKILL ends it stopped or not).
    [(code, output)] = run_group([cmd], env=clean_env(), cwd=tmp_path, timeout=120)
    return code, output, root / "hang"


def _timed_out(tmp_path: Path, *args: str) -> tuple[str, int, str, Path]:
    """A job that must fail on rank 0's timeout: rank 0's note on it, the collective's number, the
    output and the dump folder."""
    code, output, hang = _job(tmp_path, *args)
    assert code != 0, output[-3000:]
    note = re.search(r"surge: rank 0 waited more than the process group timeout \(3 s\) in (.*)", output)
    assert note, output[-3000:]
    seq = int(re.search(r"\(collective #(\d+) of the process group\)", note.group(1)).group(1))
    return note.group(1), seq, output, hang


def _since(output: str, what: str) -> float:
    return float(re.search(rf"rank 1 {what} (?:at|from) ([0-9.]+)", output).group(1))


@pytest.mark.parametrize("strategy", [DDPStrategy, FSDPStrategy])
@pytest.mark.parametrize("value", [0, -3, "10", True, datetime.timedelta(0)])
def test_a_timeout_that_is_not_a_positive_duration_is_refused_by_name(strategy, value):
    with pytest.raises(
        MisconfigurationError, match=r"^timeout=.* is not valid: a positive datetime.timedelta"
    ):
        strategy(timeout=value)


def test_timeout_none_is_the_default_and_a_number_is_seconds():
    assert DDPStrategy(timeout=None).timeout == datetime.timedelta(minutes=30)
    assert DDPStrategy(timeout=2.5).timeout == datetime.timedelta(seconds=2.5)


def test_a_dump_holds_every_thread_stack_and_says_when_there_is_no_flight_recorder(tmp_path):
    release = threading.Event()

    def waiting_for_a_peer():
        release.wait(30)

    thread = threading.Thread(target=waiting_for_a_peer, name="the-stuck-one")
    thread.start()
    try:
        path = write_dump(tmp_path / "hang", 0, 1, "a test", None)
    finally:
        release.set()
        thread.join()
    text = path.read_text()
    assert path == tmp_path / "hang" / "rank0.txt" and "why: a test" in text
    assert re.search(
        r"Thread the-stuck-one .*\n(.*\n)*.*in waiting_for_a_peer\n\s+release.wait\(30\)", text
    ), text
    assert "== flight recorder: none (none backend" in text  # no process group here


def _beat(n: int, torch_seq: int | None, surge_seq: int, where: str = "step (train.py:9)") -> dict:
    torch_pos = None if torch_seq is None else {"enqueued": torch_seq, "completed": torch_seq}
    return {"n": n, "t": 0.0, "torch": torch_pos, "surge": [surge_seq, "reduce_bool", False], "user": where}


def test_a_peer_is_judged_by_its_heartbeat_and_its_last_collective():
    # Beats on and entered collective #7: nothing to say about it.
    assert judge_peer(1, _beat(3, 7, 2), _beat(5, 7, 2), False, 7, "torch") is None
    # Beats on, behind: stuck in Python code, with where.
    stuck = judge_peer(1, _beat(3, 6, 2), _beat(5, 6, 2, "spin (x.py:3)"), True, 7, "torch")
    assert "it is alive (its heartbeat goes on) but stuck in Python code" in stuck
    assert "never entered collective #7 (its last was #6): its main thread is in spin (x.py:3)" in stuck
    # No new beat and no dump: stopped, at its last known place.
    stopped = judge_peer(1, _beat(5, 6, 2), _beat(5, 6, 2), False, 7, "torch")
    assert "its heartbeat stopped too" in stopped and "had not entered collective #7" in stopped
    # Without a flight recorder, surge's own collectives are compared.
    assert "never entered collective #3 (its last was #2)" in judge_peer(
        1, _beat(1, None, 2), _beat(2, None, 2), False, 3, "surge"
    )
    assert judge_peer(1, _beat(1, None, 3), _beat(2, None, 3), False, 3, "surge") is None
    assert "never wrote a heartbeat" in judge_peer(1, None, None, False, 3, "surge")


@pytest.mark.slow
@pytest.mark.timed  # deadlines: see tests/harness/parallel.py
def test_a_rank_stopped_with_sigstop_is_named_with_the_collective_it_never_entered(tmp_path):
    text, seq, output, hang = _timed_out(tmp_path, "--stop-rank", "1")
    assert "rank 1 stopped answering: its heartbeat stopped too" in text
    assert f"had not entered collective #{seq} when last heard from" in text
    # Rank 0 dumped its stacks, with where it waited, within the timeout (+ slack) of the stop.
    dump = (hang / "rank0.txt").read_text()
    assert "== where the main thread waited" in dump and "Thread MainThread" in dump
    assert "Thread surge-heartbeat" in dump
    assert "timed out in" in dump and f"collective #{seq}" in dump
    assert "== flight recorder" in dump
    stopped = _since(output, "stops itself")
    assert (hang / "rank0.txt").stat().st_mtime - stopped < TIMEOUT_S + SLACK_S


@pytest.mark.slow
@pytest.mark.timed  # deadlines: see tests/harness/parallel.py
def test_a_rank_stuck_in_python_code_dumps_the_frame_it_is_stuck_in(tmp_path):
    text, seq, output, hang = _timed_out(tmp_path, "--stuck-rank", "1")
    assert text.startswith("the gradient allreduce during backward"), text
    assert "rank 1 stopped answering: it is alive (its heartbeat goes on) but stuck in Python code" in text
    assert f"never entered collective #{seq} (its last was #{seq - 1})" in text
    assert "its main thread is in spin_forever (train_script.py:" in text
    assert f"{hang}/rank{{0,1}}.txt" in text
    # Both ranks dumped: rank 1's main thread shows the stuck function, called from training_step.
    stuck = (hang / "rank1.txt").read_text()
    assert "asked by rank 0, which timed out in the gradient allreduce during backward" in stuck
    main = stuck.split("Thread MainThread")[1].split("\nThread ")[0]
    assert re.search(r"in training_step\n\s+spin_forever\(\)\n.*in spin_forever\n", main), main[-1500:]
    assert "where the main thread waited" in (hang / "rank0.txt").read_text()
    started = _since(output, "is stuck")
    assert (hang / "rank1.txt").stat().st_mtime - started < TIMEOUT_S + SLACK_S


@pytest.mark.slow
def test_a_second_trainer_in_the_process_beats_into_the_live_groups_store(tmp_path):
    # The group the first Trainer started lives on; the second's environment names the default port.
    # Its heartbeat must reach the group's store (or its rank is never heard from in a hang report).
    cmd = [sys.executable, str(HERE / "heartbeat_script.py"), str(tmp_path / "beats.json")]
    [(code, output)] = run_group([cmd], env=clean_env(), cwd=tmp_path, timeout=120)
    assert code == 0, output[-3000:]
    seen = json.loads((tmp_path / "beats.json").read_text())
    assert set(seen) == {"0", "1"}, output[-3000:]  # both ranks beat during the second fit
