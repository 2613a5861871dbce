"""`--cpu-durations=N`: the N tests that used the most CPU time, their subprocesses included.

Wall times (`--durations`) swing with the load of a shared machine; the CPU seconds a test spends
(user + system, of the test process and of every child it waited for, setup and teardown included)
barely do, so they compare runs made under different loads. A child that outlives the test (a
server) or that another process waits for (a SLURM job's tasks) is not counted.
"""

from __future__ import annotations

import resource

import pytest

import script_server

_START = pytest.StashKey[float]()
_COLLECTED: dict[str, float] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-durations", type=int, default=None, metavar="N",
        help="show the N tests that used the most CPU seconds, children included (0 for all)",
    )  # fmt: skip


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    forked = script_server.cpu_seconds  # runs forked by the script server are not this process's children
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime + forked


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_START] = _cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "teardown" and _START in item.stash:
        # a user property travels with the report to the controlling process under xdist
        report.user_properties.append(("cpu_s", _cpu_seconds() - item.stash[_START]))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for name, value in report.user_properties:
        if name == "cpu_s" and report.when == "teardown":
            _COLLECTED[report.nodeid] = value


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    n = config.getoption("--cpu-durations")
    if n is None or not _COLLECTED:
        return
    rows = sorted(_COLLECTED.items(), key=lambda kv: -kv[1])
    terminalreporter.write_sep(
        "=", f"CPU seconds per test (all {len(rows)}: {sum(_COLLECTED.values()):.1f} s)"
    )
    for nodeid, seconds in rows[: n or None]:
        terminalreporter.write_line(f"{seconds:8.2f}  {nodeid}")
