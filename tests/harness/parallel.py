"""How the suite runs on several pytest-xdist workers (`-n auto --dist loadgroup`, pyproject's addopts).

- Workers: one per core, plus one: part of the suite waits (servers starting, jobs meeting at a
  rendezvous, timeouts that must expire) and a waiting worker leaves its core to the others. Each
  worker, and every process its tests start, uses one thread for torch's operations.
  `PYTEST_XDIST_AUTO_NUM_WORKERS=N` overrides it; `-n0` runs everything in this process, as does
  naming one test (`path::name`).
- Groups: a test that uses a module-, class- or session-scoped fixture of its own test file (a
  reference run, a server, a SLURM cluster) runs on the worker that has that fixture, so the fixture
  is made once, not once per worker: its tests share the group `shared:<file>`. Tests marked
  `xdist_group("name")` share that group. Every other test goes to whichever worker is free.
- Order: the long tests (marked `slow`, in a group, or in distributed/ or oracle/) are handed out
  first, the short ones next, filling the gaps; the heavy tests last, as one group.
- `@pytest.mark.timed`: a test that asserts a deadline (a job ends, a rank is named, within so many
  seconds). The timed tests form one group (`xdist_group("timed")`) handed out first: one worker
  runs them one after another, never two at once, and while it does, the workers beyond one per
  core pause (a seat each, taken by the timed group from the first to finish its test), so the
  timed jobs share the cores as on a machine busy with one other test, not oversubscribed. The
  group ran alone at the end before, which left the cores two-thirds idle for two minutes.
- `@pytest.mark.heavy`: a test that measures a speed-up or a share of time: it runs alone, the
  other workers waiting (a lock file), so its timing is that of a quiet machine. The heavy tests
  form one group, last in the order (it waits only for short tests), that holds the lock from its
  first test to its last.
  A job of 3 gloo ranks is neither: it asserts no time, and alone it would leave a core idle
  while its single-process reference runs and its ranks start; it shares the cores instead.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from shared_runs import session_dir

SHARED_SCOPES = ("module", "class", "package", "session")


def configure_workers(config: pytest.Config) -> None:
    # xdist's scheduler (in the controlling process) would reorder the groups by their number of
    # tests (`--loadscope-reorder`): keep the order pytest_collection_modifyitems gives.
    config.option.loadscopereorder = False
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # The workers share the cores already: torch's thread pools (and the processes the tests
        # start, which inherit the variable) would only make threads fight over them.
        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)
        # When the session ends, pytest collects garbage five times to report what a finalizer in a
        # leftover cycle raised; in a worker's heap after its share of the suite each took 2 s, with
        # no test left to run beside it (pytester's own setting of the count). Once is enough here.
        with contextlib.suppress(ImportError):
            from _pytest.unraisableexception import gc_collect_iterations_key

            config.stash[gc_collect_iterations_key] = 1


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    env = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    if env:
        return int(env)
    if len(config.args) == 1 and "::" in config.args[0]:
        return 0  # one test named: workers would only add their start-up
    return len(os.sched_getaffinity(0)) + 1


def _own_shared_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a fixture of a wider scope than one test that its own file defines."""
    info = getattr(item, "_fixtureinfo", None)  # pytest has no public reader of an item's fixtures
    if info is None:
        return False
    module = item.nodeid.split("::")[0]
    return any(
        fixturedef.scope in SHARED_SCOPES and fixturedef.baseid == module
        for defs in info.name2fixturedefs.values()
        for fixturedef in defs
    )


SLOW_FOLDERS = ("distributed", "oracle")  # jobs of several processes; runs under two frameworks


def _starts_early(item: pytest.Item) -> bool:
    """A test that takes long (marked, or of a slow kind) or whose group shares a long setup."""
    marked = any(item.get_closest_marker(name) for name in ("slow", "xdist_group"))
    return marked or item.path.parent.name in SLOW_FOLDERS


def _kind(item: pytest.Item | None) -> str:
    """ "heavy" (runs alone), "timed" (beside one other test at most) or ""."""
    if item is None:
        return ""
    return next((name for name in ("heavy", "timed") if item.get_closest_marker(name)), "")


def _order(item: pytest.Item) -> int:
    return {"timed": -1, "heavy": 2}.get(_kind(item), 0 if _starts_early(item) else 1)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _kind(item):
            item.add_marker(pytest.mark.xdist_group(_kind(item)), append=False)
        elif item.get_closest_marker("xdist_group") is None and _own_shared_fixture(item):
            item.add_marker(pytest.mark.xdist_group(f"shared:{item.path.name}"))
    # Workers take tests (a group at once) in this order: the timed group first (see the module's
    # docstring), the long ones next, so that the short ones fill the gaps at the end instead of
    # one long test running alone after all the rest; the heavy group last.
    items.sort(key=_order)


_held: list = []  # the locks a timed or heavy group holds from its first test to its last


@pytest.fixture(autouse=True)
def _share_the_cores(request: pytest.FixtureRequest) -> Iterator[None]:
    """Locks over the session's workers: a test holds the lock shared (heavy tests: alone) and its
    worker's seat (a timed group takes the seats of the workers beyond one per core).

    A heavy or timed test first takes the gate, so the tests that start after it wait for it (it is
    not starved by the other workers' stream of tests), then waits for what it needs. A group keeps
    them from its first test to its last (`pytest_runtest_teardown` lets go).
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker or _held:
        yield
        return
    folder = session_dir(request.getfixturevalue("tmp_path_factory"))
    kind = _kind(request.node)
    gate, lock = open(folder / "heavy.gate", "a"), open(folder / "heavy.lock", "a")  # noqa: SIM115
    fcntl.flock(gate, fcntl.LOCK_EX)
    fcntl.flock(lock, fcntl.LOCK_EX if kind == "heavy" else fcntl.LOCK_SH)
    if kind:
        if kind == "timed":
            _held.extend(_seats_beyond_the_cores(folder, worker))
        fcntl.flock(gate, fcntl.LOCK_UN)
        _held.extend((gate, lock))
        yield
        return
    seat = open(folder / f"seat-{worker}", "a")  # noqa: SIM115
    fcntl.flock(gate, fcntl.LOCK_UN)
    fcntl.flock(seat, fcntl.LOCK_EX)  # waits while a timed group holds it
    try:
        yield
    finally:
        for held in (seat, gate, lock):
            held.close()  # closing releases it


def _seats_beyond_the_cores(folder: Path, worker: str) -> list:
    """The seats of other workers, one per worker beyond one per core, each taken as its worker
    ends the test it runs (the gate keeps them from starting another)."""
    workers = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    wanted = max(0, workers - len(os.sched_getaffinity(0)))
    others = [open(folder / f"seat-gw{i}", "a") for i in range(workers) if f"gw{i}" != worker]  # noqa: SIM115
    taken: list = []
    while len(taken) < wanted:
        for seat in others:
            if seat not in taken:
                with contextlib.suppress(BlockingIOError):
                    fcntl.flock(seat, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    taken.append(seat)
                    if len(taken) == wanted:
                        break
        else:
            time.sleep(0.02)
    for seat in others:
        if seat not in taken:
            seat.close()
    return taken


@pytest.hookimpl(trylast=True)  # after the test's fixtures are torn down
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if _held and _kind(nextitem) != _kind(item):
        while _held:
            _held.pop().close()
