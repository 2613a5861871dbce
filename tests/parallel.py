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
- `@pytest.mark.heavy`: a test that asserts how long something takes (deadlines, a speed-up): it
  runs alone, the other workers waiting (a lock file), so its timing is that of a quiet machine.
  The heavy tests form one group (`xdist_group("heavy")`, one worker runs them one after another)
  that holds the lock from its first test to its last: taken one test at a time, each heavy test
  first waited for the longest test then running elsewhere (up to two minutes, the other cores
  mostly idle), and again for the next. Last in the order, the group waits only for short tests.
  A job of 3 gloo ranks is not heavy: it asserts no time, and alone it would leave a core idle
  while its single-process reference runs and its ranks start; it shares the cores instead.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator

import pytest
import torch

from shared_runs import session_dir

SHARED_SCOPES = ("module", "class", "package", "session")


def pytest_configure(config: pytest.Config) -> None:
    # xdist's scheduler (in the controlling process) would reorder the groups by their number of
    # tests (`--loadscope-reorder`): keep the order pytest_collection_modifyitems gives.
    config.option.loadscopereorder = False
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # The workers share the cores already: torch's thread pools (and the processes the tests
        # start, which inherit the variable) would only make threads fight over them.
        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)


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
    marked = any(item.get_closest_marker(name) for name in ("slow", "heavy", "xdist_group"))
    return marked or item.path.parent.name in SLOW_FOLDERS


def _heavy(item: pytest.Item) -> bool:
    return item.get_closest_marker("heavy") is not None


def _order(item: pytest.Item) -> int:
    return 2 if _heavy(item) else 0 if _starts_early(item) else 1


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _heavy(item):
            item.add_marker(pytest.mark.xdist_group("heavy"), append=False)
        elif item.get_closest_marker("xdist_group") is None and _own_shared_fixture(item):
            item.add_marker(pytest.mark.xdist_group(f"shared:{item.path.name}"))
    # Workers take tests (a group at once) in this order: the long ones first, so that the short
    # ones fill the gaps at the end instead of one long test running alone after all the rest;
    # the heavy group last (see the module's docstring).
    items.sort(key=_order)


_held: list = []  # the gate and the lock files, held exclusively from one heavy test to the next


@pytest.fixture(autouse=True)
def _heavy_tests_run_alone(request: pytest.FixtureRequest) -> Iterator[None]:
    """A reader-writer lock over the session's workers: a test holds it shared, heavy tests alone.

    A heavy test first takes the gate, so the tests that start after it wait for it (the lock is
    not starved by the other workers' stream of tests); it then waits for the running ones to end.
    Heavy tests run one after another keep both (`pytest_runtest_teardown` lets go after the last).
    """
    if not os.environ.get("PYTEST_XDIST_WORKER") or _held:
        yield
        return
    folder = session_dir(request.getfixturevalue("tmp_path_factory"))
    heavy = _heavy(request.node)
    gate, lock = open(folder / "heavy.gate", "a"), open(folder / "heavy.lock", "a")  # noqa: SIM115
    fcntl.flock(gate, fcntl.LOCK_EX)
    fcntl.flock(lock, fcntl.LOCK_EX if heavy else fcntl.LOCK_SH)
    if heavy:
        _held.extend((gate, lock))
        yield
        return
    fcntl.flock(gate, fcntl.LOCK_UN)
    try:
        yield
    finally:
        gate.close()
        lock.close()  # closing releases it


@pytest.hookimpl(trylast=True)  # after the test's fixtures are torn down
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if _held and (nextitem is None or not _heavy(nextitem)):
        while _held:
            _held.pop().close()
