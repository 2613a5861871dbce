"""A hang is named from the collective's own timeout, never from an error's wording: before, any
error whose text held "timed out" (a user's HTTP request in training_step) was reported as a process
group hang that blamed a healthy rank and advised raising `timeout=`. The real timeouts are in
tests/distributed/test_hangs.py (two ranks, one stopped)."""

from __future__ import annotations

import dataclasses
import datetime
import json

import pytest
import torch
import torch.distributed as dist

from surge.strategies import DDPStrategy
from surge.strategies.hang_dump import overdue_collective


@pytest.fixture
def group(tmp_path):
    """A one-process gloo group (its flight recorder numbers the collectives), destroyed after."""
    assert not dist.is_initialized()
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=datetime.timedelta(seconds=3))
    try:
        yield
    finally:
        dist.destroy_process_group()


def two_ranks() -> DDPStrategy:
    strategy = DDPStrategy(timeout=3)
    strategy.env = dataclasses.replace(strategy.env, world_size=2, global_rank=1)
    return strategy


def users_request() -> None:
    raise RuntimeError("upstream request timed out after 3 s (timeout=3)")


@pytest.mark.parametrize("with_group", [False, True])
def test_an_error_that_only_says_timed_out_is_no_hang(request, with_group):
    if with_group:
        request.getfixturevalue("group")
        dist.all_reduce(torch.ones(1))  # a completed collective: none is waiting
    try:
        users_request()
    except RuntimeError as err:
        two_ranks().explain_failure(err)
        assert not getattr(err, "__notes__", [])  # no "rank 0 stopped answering", no advice on timeout=


def test_the_latest_collective_is_overdue_only_past_its_own_timeout(group):
    dist.all_reduce(torch.ones(1))
    assert overdue_collective() is False  # just made, well within its 3 s
    raw = torch._C._distributed_c10d._dump_fr_trace_json(True, False)
    latest = max(json.loads(raw)["entries"], key=lambda e: e["collective_seq_id"])
    made, timeout_ns = int(latest["time_created_ns"]), int(latest["timeout_ms"]) * 1_000_000
    assert timeout_ns == 3_000_000_000
    assert overdue_collective(now_ns=made + timeout_ns - 1) is False
    assert overdue_collective(now_ns=made + timeout_ns) is True


def test_a_hang_dump_that_cannot_be_written_is_said_in_the_note_not_raised(tmp_path):
    from surge.strategies.hang_report import _where_dumped
    from surge.strategies.hang_watch import HangWatch

    blocked = tmp_path / "a-file"
    blocked.write_text("")
    watch = HangWatch(rank=0, world_size=2, addr="127.0.0.1", port=1, directory=blocked / "hang")
    assert watch.dump("a test") is None  # no folder can be made under a file: nothing raised
    said = _where_dumped(watch, acked=[1])
    assert (
        said.startswith(f"Stacks: {blocked / 'hang'}/rank{{1}}.txt.")
        and "Rank 0 could not write its own" in said
    )
