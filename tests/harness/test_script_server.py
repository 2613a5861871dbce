"""tests/harness/script_server.py: a run forked from the server is what a new interpreter would be for the
script: the same argv, cwd, `sys.path[0]`, environment, output (import-time warnings included) and
exit status; a timeout ends it and what it started."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

import script_server

NOISY = "import warnings\nprint('printed at import')\nwarnings.warn('warned at import')\n"
PROBE = """import json, os, sys, noisy
def annotated(x: int): pass
print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0], "var": os.environ.get("PROBE_VAR"),
                  "main": __name__, "orig_argv": sys.orig_argv, "globals": sorted(globals())[:7],
                  "annotation": str(annotated.__annotations__["x"])}))
sys.stderr.write("to stderr\\n")
sys.exit(int(sys.argv[-1]))
"""


@pytest.fixture
def probe(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "noisy.py").write_text(NOISY)
    (lib / "probe.py").write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": str(lib), "PROBE_VAR": "x"}
    return lib, env


@pytest.mark.parametrize("kind", ["script", "module", "code"])
def test_a_forked_run_sees_what_a_new_interpreter_sees(probe, tmp_path, kind):
    lib, env = probe
    argv = {"script": [str(lib / "probe.py")], "module": ["-m", "probe"], "code": ["-c", PROBE]}[kind] + [
        "a",
        "3",
    ]
    fresh = subprocess.run(
        [sys.executable, *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    runs = [
        script_server.run(
            sys.executable, argv, cwd=tmp_path, env={**env, "PROBE_VAR": value}, preload=["noisy"]
        )
        for value in ("x", "y")
    ]
    assert fresh.returncode == 3 and "warned at import" in fresh.stderr
    assert json.loads(fresh.stdout.splitlines()[-1])["annotation"] == "<class 'int'>"
    forked = runs[0]
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    # the second run got its own environment, from the same server (only PROBE_VAR changed)
    assert json.loads(runs[1].stdout.splitlines()[-1])["var"] == "y"


# sys.exit's argument: the status a new interpreter ends with (a C long's low byte, -1 for a larger int)
CODES = {"True": 1, "-1": 255, "2**40 + 3": 3, "2**70": 255, "1.5": 1, "None": 0}
ENDINGS = {
    "raises": "def fail():\n    raise ValueError('boom')\nfail()\n",
    "exits with a message": "import sys\nsys.exit('bye')\n",
    "exits with 300": "import sys\nsys.exit(300)\n",
    "interrupted": "raise KeyboardInterrupt\n",
    "closed its stdout": "import sys\nprint('last words')\nsys.stdout.close()\n",
    "threads, atexit, finalizers": """import atexit, sys, threading, time
class Noisy:
    def __init__(self, name):
        self.name, self.cycle = name, self
    def __del__(self):
        print("finalized", self.name)
kept = Noisy("kept")
Noisy("garbage in a cycle")
atexit.register(print, "atexit ran")
threading.Thread(target=lambda: (time.sleep(0.3), print("thread ended"))).start()
sys.stdout.write("buffered, not flushed ")
""",
    "replaced its stdout with one without closed": """import sys
class Tee:
    def __init__(self, *streams):
        self.streams = streams
    def write(self, text):
        for stream in self.streams:
            stream.write(text)
    def flush(self):
        for stream in self.streams:
            stream.flush()
sys.stdout = Tee(sys.__stdout__, sys.__stderr__)
print("to both")
""",
    "stdout's flush fails": """import sys
class Broken:
    def __repr__(self):
        return "<Broken stdout>"
    def write(self, text):
        sys.__stdout__.write(text)
    def flush(self):
        raise OSError("flush failed")
sys.stdout = Broken()
print("written")
""",
    "pickles its classes after the body": """import atexit, pickle, threading, time
class Point:
    pass
def dump(where):
    print(where, type(pickle.loads(pickle.dumps(Point()))).__name__, flush=True)
atexit.register(dump, "atexit")
threading.Thread(target=lambda: (time.sleep(0.2), dump("thread"))).start()
""",
    # the worker waits for the main thread to be joining it (stopped by threading's shutdown), then
    # interrupts that thread itself: no clock races the main thread on a busy machine. Python's own
    # handler is installed first: a shell's background job (`pytest ... &`) inherits SIGINT ignored.
    "interrupted while its threads are joined": """import atexit, signal, threading, time
signal.signal(signal.SIGINT, signal.default_int_handler)
def worker():
    main = threading.main_thread()
    while main.is_alive():
        time.sleep(0.01)
    signal.pthread_kill(main.ident, signal.SIGINT)
    time.sleep(5)
    print("never")
threading.Thread(target=worker).start()
atexit.register(print, "atexit ran")
print("body ended")
""",
    **{f"exits with {code}": f"import sys\nsys.exit({code})\n" for code in CODES},
    "raises SystemExit(1, 2)": "raise SystemExit(1, 2)\n",
}


STATUS = {"raises": 1, "exits with a message": 1, "exits with 300": 300 & 0xFF, "interrupted": -signal.SIGINT,
          "closed its stdout": 0, "threads, atexit, finalizers": 0, "replaced its stdout with one without closed": 0,
          "stdout's flush fails": 120, "pickles its classes after the body": 0,
          "interrupted while its threads are joined": 0, **{f"exits with {c}": s for c, s in CODES.items()},
          "raises SystemExit(1, 2)": 1}  # fmt: skip


@pytest.mark.parametrize("ending", ENDINGS)
def test_a_forked_run_ends_as_a_new_interpreter_ends(tmp_path, ending):
    """The exit status, the traceback or message, and what threads, atexit and finalizers print at
    the end are a new interpreter's (the server skips only tearing down the preloaded modules)."""
    script = tmp_path / "ending.py"
    script.write_text(ENDINGS[ending])
    fresh = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    forked = script_server.run(sys.executable, [str(script)], cwd=tmp_path, env=dict(os.environ), preload=[])
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert fresh.returncode == STATUS[ending]  # what a new interpreter ends with, as the case meant
    if ending == "threads, atexit, finalizers":
        assert fresh.stdout.endswith(
            "thread ended\natexit ran\nfinalized garbage in a cycle\nfinalized kept\n"
        )
    if ending == "pickles its classes after the body":
        assert fresh.stdout == "thread Point\natexit Point\n"
    if ending == "interrupted while its threads are joined":
        assert "Exception ignored in: <module 'threading'" in fresh.stderr and "atexit ran" in fresh.stdout


# Endings whose output a buffered stdout decides (PYTHONUNBUFFERED unset), or what they leave in files.
BUFFERED = {
    "a module-level file, sys.exit(main())": """import sys
log = open("out.txt", "w")
log.write("data")
def main():
    return 0
sys.exit(main())
""",
    "a module-level file, raises": """log = open("out.txt", "w")
log.write("data")
def fail():
    raise ValueError("boom")
fail()
""",
    "a module-level file of a module it imported": "import helper\nprint('main done')\n",
    "a watchdog ends it after the body": """import os, threading, time
def watchdog():
    time.sleep(0.3)
    os._exit(3)
threading.Thread(target=watchdog).start()
print("printed by the body")
raise ValueError("after the print")
""",
    "C's printf without a newline": "import ctypes, sys\nctypes.CDLL(None).printf(b'from C')\nsys.exit(4)\n",
}
HELPER = """class Noisy:
    def __del__(self):
        print("helper's object finalized")
kept = Noisy()
log = open("helper.txt", "w")
log.write("helper data")
"""
FRESH = {  # what a new interpreter does, as the case meant (the same in every form)
    "a module-level file, sys.exit(main())": lambda done, files: files == {"out.txt": "data"},
    "a module-level file, raises": lambda done, files: files == {"out.txt": "data"},
    "a module-level file of a module it imported": lambda done, files: (
        files == {"helper.txt": "helper data"} and done.stdout == "main done\nhelper's object finalized\n"
    ),
    "a watchdog ends it after the body": lambda done, files: done.returncode == 3,
    "C's printf without a newline": lambda done, files: (done.returncode, done.stdout) == (4, "from C"),
}


@pytest.mark.parametrize("form", ["script", "relative script", "module", "code"])
@pytest.mark.parametrize("ending", BUFFERED)
def test_a_forked_run_ends_as_a_new_interpreter_ends_with_buffered_output(tmp_path, ending, form):
    """With stdout buffered: what the body printed when a thread ends the process after it (flushed
    after a script file's body only), module-level files of `__main__` and of what it imported flushed
    by their finalizers whether it returned, exited or raised, C's stdio flushed at exit; tracebacks as
    the form gives them (absolute paths, runpy's frames for -m); the same files left."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    argv = {"script": [str(tmp_path / "{}" / "ending.py")], "relative script": ["ending.py"],
            "module": ["-m", "ending"], "code": ["-c", BUFFERED[ending]]}[form]  # fmt: skip
    ended = []
    for kind in ("fresh", "forked"):
        cwd = tmp_path / kind
        cwd.mkdir()
        (cwd / "ending.py").write_text(BUFFERED[ending])
        (cwd / "helper.py").write_text(HELPER)
        args = [a.replace("{}", kind) for a in argv]
        if kind == "fresh":
            done = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                                  stdin=subprocess.DEVNULL)  # fmt: skip
        else:
            done = script_server.run(sys.executable, args, cwd=cwd, env=env, preload=[])
        files = {p.name: p.read_text() for p in cwd.glob("*.txt")}
        assert FRESH[ending](done, files) or kind == "forked", (done, files)
        ended.append((done.returncode, done.stdout, done.stderr.replace(str(cwd), "DIR"), files))
    assert ended[1] == ended[0]


@pytest.mark.parametrize("argv", [["missing.py"], ["-m", "missing_module"]])
def test_a_run_that_cannot_start_ends_as_a_new_interpreter_ends(tmp_path, argv):
    fresh = subprocess.run([sys.executable, *argv], cwd=tmp_path, capture_output=True, text=True,
                           stdin=subprocess.DEVNULL)  # fmt: skip
    forked = script_server.run(sys.executable, argv, cwd=tmp_path, env=dict(os.environ), preload=[])
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert fresh.returncode in (1, 2) and fresh.stderr.startswith(sys.executable)


def test_a_timeout_ends_the_run_and_what_it_started(tmp_path):
    script = tmp_path / "sleeper.py"
    script.write_text(
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)  # {tmp_path.name}'])\n"
        "time.sleep(120)\n"
    )
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        script_server.run(
            sys.executable, [str(script)], cwd=tmp_path, env=dict(os.environ), preload=[], timeout=3
        )
    assert time.monotonic() - started < 60
    time.sleep(0.5)
    left = [p for p in psutil.process_iter(["cmdline"]) if tmp_path.name in " ".join(p.info["cmdline"] or [])]
    assert left == []
    # the server still serves; a run that ends at once is not mistaken for one that timed out
    (tmp_path / "done.py").write_text("print('done')\n")
    for _ in range(5):
        done = script_server.run(
            sys.executable,
            [str(tmp_path / "done.py")],
            cwd=tmp_path,
            env=dict(os.environ),
            preload=[],
            timeout=60,
        )
        assert (done.returncode, done.stdout) == (0, "done\n")


def test_a_started_run_is_killed_and_waited_for_as_a_popen_is(tmp_path):
    code = (
        "import pickle, sys, time\n"
        "class Defined: pass\n"
        "print(len(pickle.dumps(Defined)) > 0, flush=True)  # by reference to __main__, as python -c does\n"
        "open(sys.argv[1], 'w').close()\n"
        "time.sleep(120)\n"
    )
    up = tmp_path / "up"
    started = script_server.start(
        sys.executable, ["-c", code, str(up)], cwd=tmp_path, env=dict(os.environ), preload=[]
    )
    deadline = time.monotonic() + 60
    while not up.exists():
        assert started.poll() is None and time.monotonic() < deadline, started.stderr
        time.sleep(0.02)
    with pytest.raises(subprocess.TimeoutExpired):
        started.wait(timeout=0.1)
    assert os.getpgid(started.pid) == started.pid  # a session of its own: killpg ends what it started
    os.kill(started.pid, 9)
    assert started.wait(timeout=60) == -9 == started.poll()
    assert (started.stdout, started.stderr) == ("True\n", "")


RELAUNCHING = """import json, os, signal, subprocess, sys, time
preloaded = "torch" in sys.modules  # before this script imports anything
if len(sys.argv) > 1:  # a rank
    pidfile, mode = sys.argv[1], sys.argv[2]
    open(pidfile, "w").write(str(os.getpid()))
    print(f"rank preloaded={preloaded}", flush=True)
    if mode == "term":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
    if mode == "fail":
        sys.exit(3)
    time.sleep(120)
    sys.exit(0)
report = {}
done = subprocess.run([sys.executable, __file__, "fail.pid", "fail"], capture_output=True, text=True)
report["fail"] = [done.returncode, done.stdout.strip()]
other = subprocess.run([sys.executable, "-c", "import sys; print('torch' in sys.modules)"],
                       capture_output=True, text=True)
report["other command"] = other.stdout.strip()
for mode in ("term", "kill"):
    rank = subprocess.Popen([sys.executable, __file__, f"{mode}.pid", mode], stdout=subprocess.DEVNULL)
    while not os.path.exists(f"{mode}.pid") or not open(f"{mode}.pid").read():
        time.sleep(0.01)
    time.sleep(0.2)  # its handler is in place
    rank.terminate() if mode == "term" else rank.kill()
    report[mode] = [rank.wait(timeout=60), int(open(f"{mode}.pid").read()) != rank.pid]
print(json.dumps(report))
"""


def test_a_run_that_starts_its_own_script_again_gets_a_forked_rank(tmp_path):
    (tmp_path / "job.py").write_text(RELAUNCHING)
    done = script_server.run(
        sys.executable, ["job.py"], cwd=tmp_path, env=dict(os.environ), preload=["torch"], timeout=120
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["fail"] == [3, "rank preloaded=True"]  # forked from the server: torch was there
    assert report["other command"] == "False"  # anything else runs in a new interpreter
    assert report["term"] == [7, True]  # a signal to the launcher's child reaches the rank
    assert report["kill"] == [-9, True]
    killed = int((tmp_path / "kill.pid").read_text())
    deadline = time.monotonic() + 10
    while psutil.pid_exists(killed) and psutil.Process(killed).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the rank outlived the process its launcher killed"
        time.sleep(0.05)


@pytest.mark.parametrize("form", [["-u", "killed.py"], ["-u", "-c", "import killed"]])
def test_python_u_writes_through_as_a_new_interpreter_does(tmp_path, form):
    """`python -u` (how torchrun starts its workers): what a run printed is in its output even when
    it is killed before any flush."""
    (tmp_path / "killed.py").write_text("import os, signal, sys\nprint('before')\nsys.stderr.write('err')\n"
                                        "os.kill(os.getpid(), signal.SIGKILL)\n")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    fresh = subprocess.run([sys.executable, *form], cwd=tmp_path, env=env, capture_output=True, text=True,
                           stdin=subprocess.DEVNULL)  # fmt: skip
    forked = script_server.run(sys.executable, form, cwd=tmp_path, env=env, preload=[])
    assert (fresh.returncode, fresh.stdout, fresh.stderr) == (-9, "before\n", "err")
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
