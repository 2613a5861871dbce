"""`--cpu-durations=N`: the N tests that used the most CPU time, their subprocesses included.
`--timeline=FILE`: each test's worker, start and end (wall clock) and CPU seconds, a JSON line each,
to see where the workers waited (`python tests/harness/cpu_durations.py FILE` summarises it).

Wall times (`--durations`) swing with the load of a shared machine; the CPU seconds a test spends
(user + system, of the test process and of every child it waited for, setup and teardown included)
barely do, so they compare runs made under different loads. A child that outlives the test (a
server) or that another process waits for (a SLURM job's tasks) is not counted.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path

import pytest

import script_server

_START = pytest.StashKey[float]()
_WALL = pytest.StashKey[float]()
_COLLECTED: dict[str, float] = {}
_TIMELINE: list[dict] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-durations", type=int, default=None, metavar="N",
        help="show the N tests that used the most CPU seconds, children included (0 for all)",
    )  # fmt: skip
    parser.addoption(
        "--timeline", default=None, metavar="FILE",
        help="write each test's worker, wall-clock start and end and CPU seconds to FILE (JSON lines)",
    )  # fmt: skip


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    forked = script_server.cpu_seconds  # runs forked by the script server are not this process's children
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime + forked


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_START] = _cpu_seconds()
    item.stash[_WALL] = time.time()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "teardown" and _START in item.stash:
        # a user property travels with the report to the controlling process under xdist
        report.user_properties.append(("cpu_s", _cpu_seconds() - item.stash[_START]))
        report.user_properties.append(("wall", (item.stash[_WALL], time.time())))
        report.user_properties.append(("worker", os.environ.get("PYTEST_XDIST_WORKER", "main")))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "teardown":
        return
    props = dict(report.user_properties)
    if "cpu_s" in props:
        _COLLECTED[report.nodeid] = props["cpu_s"]
    if "wall" in props:
        start, end = props["wall"]
        _TIMELINE.append({"test": report.nodeid, "worker": props["worker"], "start": start, "end": end,
                          "cpu_s": props["cpu_s"]})  # fmt: skip


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    timeline = config.getoption("--timeline")
    if timeline and _TIMELINE:
        Path(timeline).write_text("".join(json.dumps(row) + "\n" for row in _TIMELINE))
    n = config.getoption("--cpu-durations")
    if n is None or not _COLLECTED:
        return
    rows = sorted(_COLLECTED.items(), key=lambda kv: -kv[1])
    terminalreporter.write_sep(
        "=", f"CPU seconds per test (all {len(rows)}: {sum(_COLLECTED.values()):.1f} s)"
    )
    for nodeid, seconds in rows[: n or None]:
        terminalreporter.write_line(f"{seconds:8.2f}  {nodeid}")


def summarise(path: Path) -> str:
    """Per worker: how long it ran tests and how long it sat between them; the last tests to end."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    begin, end = min(r["start"] for r in rows), max(r["end"] for r in rows)
    lines = [f"{len(rows)} tests, {end - begin:.0f} s wall, {sum(r['cpu_s'] for r in rows):.0f} CPU s"]
    for worker in sorted({r["worker"] for r in rows}):
        mine = sorted((r for r in rows if r["worker"] == worker), key=lambda r: r["start"])
        busy = sum(r["end"] - r["start"] for r in mine)
        cpu = sum(r["cpu_s"] for r in mine)
        lines.append(
            f"{worker}: {len(mine)} tests, busy {busy:.0f} s, CPU {cpu:.0f} s, ends at {mine[-1]['end'] - begin:.0f} s"
        )
    lines.append("the last 15 tests to end (start, end, CPU s):")
    for r in sorted(rows, key=lambda r: r["end"])[-15:]:
        lines.append(
            f"  {r['start'] - begin:6.0f} {r['end'] - begin:6.0f} {r['cpu_s']:7.1f}  {r['worker']}  {r['test']}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(summarise(Path(sys.argv[1])))
