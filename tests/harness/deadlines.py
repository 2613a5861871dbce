"""A test that fails on a deadline says so: the machine's load when it failed, and that the deadline,
not the behaviour, may be the cause (a busy machine makes a job, a rank or a server slower)."""

from __future__ import annotations

import os
import subprocess

import pytest

_WORDS = ("timed out", "timeout", "deadline")


def _on_a_deadline(item: pytest.Item, call: pytest.CallInfo) -> bool:
    if item.get_closest_marker("timed"):
        return True
    error = call.excinfo
    if error is None:
        return False
    if error.errisinstance((subprocess.TimeoutExpired, TimeoutError)):
        return True
    return any(word in str(error.value).lower() for word in _WORDS)


def load_note() -> str:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "this test asserts a deadline; the machine's load is unknown here"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    busy = " (busier than its cores: other work was running)" if one > cores else ""
    return (
        f"this test asserts a deadline: it failed with the machine's load average at {one:.2f} "
        f"{five:.2f} {fifteen:.2f} on {cores} cores{busy}. A busy machine can miss a deadline the "
        "behaviour would meet; run it again alone (python -m pytest -n0 <test>) to tell the two apart."
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.when == "call" and _on_a_deadline(item, call):
        report.sections.append(("deadline", load_note()))
