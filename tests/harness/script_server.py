"""Runs `python SCRIPT ARGS`, `python -m MODULE ARGS` or `python -c CODE ARGS` in a process forked from an interpreter
that has imported the heavy packages already (torch; real Lightning or surge), instead of a new
interpreter that imports them again (2-8 s of CPU per run on a 2-core machine).

Each run still gets a process of its own, which starts as a fresh interpreter that had just
imported those packages would: its own cwd, argv, environment (`os.environ` replaced), stdin from
/dev/null, stdout and stderr, `sys.path[0]` (the script's folder, or the cwd for `-m`), a new
session (a timeout ends the run and everything it started), `random` reseeded, `sys.orig_argv`, a
`__main__` module of its own (what it defines pickles, also in `atexit` and threads), the
interpreter's exit (output flushed, the traceback, threads joined, `atexit` run, finalizers in the
interpreter's order, exit status as `subprocess` reports it: `_exit`), and what the imports printed
(warnings) at the start of its output.
What the imports made is frozen out of garbage collection, and a run's exit leaves the preloaded
modules as they are: a collection or a teardown would write to every page the run shares with its
server, a copy of the whole heap (0.8-1.3 s of CPU per run).
What the script imports itself (its own modules, `record.py`) is imported in that process only, and
let go of at its exit as the interpreter's teardown would.
A launcher in the run that starts the run's own script again (`Trainer(devices=2)`, Lightning's
DDP) gets its ranks forked from the same server too (`SHIM`, the run's `sys.executable`).

A server serves one test process, one run at a time, for one interpreter and environment: the
environment at import time is the one the run would have had, but for `PER_RUN` variables, which
only the runs read (`ORACLE_DIR`, pytest's `PYTEST_CURRENT_TEST`, a seed a test set). The imports
are made once per test session and kind of server: a `_zygote` of that kind, shared by the session's
test processes (pytest-xdist workers) through a socket in `SERVERS` (set by `share_servers`), forks
each new server already loaded. `SURGE_TEST_FORK=0` runs every script in a new interpreter instead.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# Variables a server's imports do not read, so it serves runs that differ in them: the runs' own,
# pytest's, and what earlier tests or imports set in the test process's environment, which the runs
# inherit (MLflow's telemetry id, inductor's cache directory, seed_everything's, W&B's service),
# all read at run time. KMP_* are for Intel's OpenMP, which torch's CPU build does not load.
PER_RUN = (
    "ORACLE_DIR", "ORACLE_FRAMEWORK", "PYTEST_CURRENT_TEST", "PYTEST_XDIST_WORKER", "COLUMNS", "LINES",
    "_MLFLOW_TELEMETRY_SESSION_ID", "TORCHINDUCTOR_CACHE_DIR", "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR",
    "PL_GLOBAL_SEED", "PL_SEED_WORKERS", "WANDB_SERVICE", "KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK",
    "SURGE_CACHE_DIR",  # each test's own (conftest.py); read when a run writes its records
    "MASTER_PORT",  # each run's reserved port (tests/oracle/oracle_runs.py); read when ranks start
)  # fmt: skip
SERVERS = "SURGE_TEST_SERVERS"  # the session's folder of zygotes: their sockets, and "owner" (pytest's pid)
# What a training run imports on first use, so a server that imports torch imports them too: torch's
# optimizers import torch._dynamo when the first one is built (2 s of CPU, most of a small fit's),
# and the default logger is TensorBoard's (0.3 s). A new interpreter would import them in the run.
FIRST_USE = ("torch._dynamo", "torch.utils.tensorboard")
MAX_SERVERS = 6  # per test process: the suite uses 5 kinds (interpreter, imports, environment)


def _zygote(address: str, preload: list[str]) -> dict | None:
    """A session's server of one kind: imports `preload`, then forks a server for each test process
    that asks (through `address`: its stdin, stdout and stderr, and the folder it works in); ends
    with the session's pytest (`owner`). Returns, in a forked child only, the request that child runs.
    """
    import socket

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(f"{address}.new")
    listener.listen(64)  # asks wait here while the imports run
    # Under its name only once it listens: a test process that sees the name can connect (between
    # bind and listen a connect is refused, and was taken for a zygote that had died).
    os.rename(f"{address}.new", address)
    owner = os.pidfd_open(int(Path(address).with_name("owner").read_text()))
    _import(preload)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the servers it forks are reaped by the kernel
    while True:
        if owner in select.select([listener, owner], [], [])[0]:
            return None
        conn, _ = listener.accept()
        with conn:
            message, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
            folder = json.loads(message)["folder"]
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                listener.close()
                os.close(owner)
                os.setsid()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd, received in enumerate(fds):
                    os.dup2(received, fd)
                    os.close(received)
                for printed in ("preload.out", "preload.err"):
                    Path(folder, printed).write_bytes(Path(printed).read_bytes())
                os.chdir(folder)
                return _Loop().serve()
            for fd in fds:
                os.close(fd)
            with contextlib.suppress(OSError):
                conn.send(f"pid {pid}".encode())


def _import(preload: list[str]) -> None:
    """Imports `preload`; what importing prints (warnings) goes to preload.out and preload.err, which
    each run prints first, as a new interpreter would."""
    import importlib

    saved = [os.dup(1), os.dup(2)]
    for fd, name in ((1, "preload.out"), (2, "preload.err")):
        out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, fd)
        os.close(out)
    for name in preload:
        importlib.import_module(name)
    if "torch" in preload:
        for name in FIRST_USE:
            importlib.import_module(name)
    # What the imports made stays out of every later collection: a collection in a forked run would
    # otherwise walk (and so copy, page by page) the whole shared heap, 0.2-0.3 s of CPU each time.
    global _libc
    import ctypes

    _libc = ctypes.CDLL(None)
    gc.collect()
    gc.freeze()
    sys.stdout.flush()
    sys.stderr.flush()
    for fd, copy in zip((1, 2), saved):
        os.dup2(copy, fd)
        os.close(copy)


class _Loop:
    """The server's loop. Runs come as lines on stdin, one at a time, and "pid N" and "exit CODE CPU"
    go back on stdout; the ranks a run's launcher starts come through `SHIM` over a socket."""

    def __init__(self) -> None:
        import selectors
        import socket

        self.address = os.path.abspath("ranks.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.listener.bind(self.address)
        self.listener.listen(64)
        self.shim = Path("python").resolve()
        self.shim.write_text(SHIM.format(python=sys.executable, address=self.address))
        self.shim.chmod(0o755)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.selector = selectors.DefaultSelector()
        self.selector.register(0, selectors.EVENT_READ, self._runs)
        self.selector.register(self.listener, selectors.EVENT_READ, self._ranks)
        self.selector.register(self.wake_r, selectors.EVENT_READ, self._ended)
        self.pending = b""
        self.run: tuple[int, dict] | None = None  # the run in progress: its pid and request
        self.ranks: dict[int, Any] = {}  # a rank's pid: the connection of the shim standing for it
        self.ranks_cpu = (
            0.0  # counted with the run in progress when they end (their run, but for a straggler)
        )

    def serve(self) -> dict | None:
        """Returns None when the test process closes stdin; in a forked child, its request."""
        while True:
            for key, _ in self.selector.select():
                request = key.data()
                if request is not None:
                    return request if request else None

    def _fork(self, request: dict) -> int:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: nothing of the server's loop stays open
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            self.selector.close()
            self.listener.close()
            os.close(self.wake_r)
            os.close(self.wake_w)
            for conn in self.ranks.values():
                conn.close()
            request["shim"] = str(self.shim)
        return pid

    def _runs(self) -> dict | None:
        chunk = os.read(0, 1 << 20)
        if not chunk:
            return {}  # the test process closed it: the server ends
        self.pending += chunk
        while b"\n" in self.pending:
            line, self.pending = self.pending.split(b"\n", 1)
            request = json.loads(line)
            pid = self._fork(request)
            if pid == 0:
                return request
            self.run = (pid, request)
            sys.stdout.write(f"pid {pid}\n")
            sys.stdout.flush()
        return None

    def _ranks(self) -> dict | None:
        import socket

        conn, _ = self.listener.accept()
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        request = json.loads(message)
        try:
            rank = self.run is not None and _relaunch(request, self.run[1])
            if rank:
                request["watch"] = os.pidfd_open(request["shim_pid"])
        except ProcessLookupError:  # the shim is gone already: nothing to start
            rank = False
        if not rank:
            for fd in fds:
                os.close(fd)
            with contextlib.suppress(OSError):
                conn.send(b"exec")  # not a rank: the shim becomes the interpreter itself
            conn.close()
            return None
        pid = self._fork(request)
        if pid == 0:
            conn.close()
            request["fds"] = fds
            return request
        os.close(request["watch"])
        for fd in fds:
            os.close(fd)
        conn.send(f"pid {pid}".encode())
        self.ranks[pid] = conn
        return None

    def _ended(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self.wake_r, 4096):
                pass
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            code, cpu = os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime
            if pid in self.ranks:
                self.ranks_cpu += cpu
                conn = self.ranks.pop(pid)
                with contextlib.suppress(OSError):
                    conn.send(f"exit {code}".encode())
                conn.close()
            elif self.run is not None and pid == self.run[0]:
                # the run's CPU, with its waited-for children's and its ranks'
                sys.stdout.write(f"exit {code} {cpu + self.ranks_cpu}\n")
                sys.stdout.flush()
                self.run, self.ranks_cpu = None, 0.0


# What a launcher gives a rank beyond the run's own environment (surge's, Lightning's), all read at
# run time. A command whose environment differs in anything else may depend on it at import time
# (`surge doctor` tells the script it runs with SURGE_DOCTOR, read when surge is imported): it gets
# a new interpreter.
RANK_VARIABLES = (
    "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK", "LOCAL_WORLD_SIZE",
    "GROUP_RANK", "SURGE_LAUNCHED", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", *PER_RUN,
    # torchrun's agent (torch.distributed.elastic), read when the process group starts
    "ROLE_NAME", "ROLE_RANK", "ROLE_WORLD_SIZE", "GROUP_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_SIGNALS_TO_HANDLE", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
)  # fmt: skip


def _relaunch(rank: dict, run: dict) -> bool:
    """Whether a command the run started is one of its ranks: the run's own script (or module) again,
    in the run's environment but for what a launcher adds."""
    names = set(rank["env"]) | set(run["env"])
    changed = {n for n in names if rank["env"].get(n) != run["env"].get(n)}
    if any(n not in RANK_VARIABLES and not n.startswith("PL_") for n in changed):
        return False
    return bool(_targets(rank["argv"], rank["cwd"]) & _targets(run["argv"], run["cwd"]))


def _targets(argv: list[str], cwd: str) -> set[str]:
    found = {f"-m {argv[1]}"} if argv[:1] == ["-m"] and len(argv) > 1 else set()
    for arg in argv:
        if arg.endswith(".py") and os.path.isfile(os.path.join(cwd, arg)):
            found.add(os.path.realpath(os.path.join(cwd, arg)))
    return found


# What a run and its ranks see as `sys.executable`. A launcher that starts the run's own script again
# (surge's, Lightning's) gets a rank forked from the server, as the run was, instead of an interpreter
# that imports torch again (4-5 s of CPU a rank); any other command runs in the real interpreter.
# The signals it gets go to the rank, its exit status is the rank's, and if it is killed the rank is.
SHIM = """#!{python} -S
import json, os, signal, socket, sys
PYTHON, ADDRESS = {python!r}, {address!r}
sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
try:
    sock.connect(ADDRESS)
    request = {{"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ), "shim_pid": os.getpid()}}
    socket.send_fds(sock, [json.dumps(request).encode()], [0, 1, 2])
    answer = sock.recv(256).split()
except OSError:
    answer = [b"exec"]
if answer[:1] != [b"pid"]:
    sock.close()
    os.execv(PYTHON, [PYTHON, *sys.argv[1:]])
pid = int(answer[1])
def forward(signum, frame):
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass
for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP, signal.SIGCONT):
    signal.signal(signum, forward)
ended = sock.recv(256).split()
code = int(ended[1]) if ended[:1] == [b"exit"] else 1
if code < 0:
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code if code >= 0 else 128 - code)
"""


def _watch_shim(pidfd: int) -> None:
    """In a rank: end when the shim standing for it ends (a kill of the shim was meant for the rank)."""
    select.select([pidfd], [], [])
    os.kill(os.getpid(), signal.SIGKILL)


def _become(request: dict, main: Any) -> tuple[Any, bool]:
    """In the forked child: take on the run's process state and make the module `main` its
    `__main__`, as the interpreter's own starts; returns what runs the script, module or code in it,
    and whether that is a script file (which the interpreter ends a little differently)."""
    import builtins
    import importlib.machinery
    import random
    import runpy
    import threading

    if "fds" in request:  # a rank: the shim's stdin, stdout and stderr; it ends with the shim
        os.setpgid(0, 0)
        for fd, received in enumerate(request["fds"]):
            os.dup2(received, fd)
            os.close(received)
        threading.Thread(target=_watch_shim, args=(request["watch"],), daemon=True).start()
    else:
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        for fd, path, printed in (
            (1, request["stdout"], "preload.out"),
            (2, request["stderr"], "preload.err"),
        ):
            out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.write(out, Path(request["server"], printed).read_bytes())
            os.dup2(out, fd)
            os.close(out)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.orig_argv = [sys.orig_argv[0], *request["argv"]]  # the interpreter as the test named it
    argv = _interpreter_options(request["argv"])
    sys.executable = request["shim"]
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own stdin
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    # what the run defines pickles by reference to `__main__`, also in atexit and in its threads
    sys.modules["__main__"] = main
    main.__annotations__, main.__builtins__ = {}, builtins
    main.__loader__ = importlib.machinery.BuiltinImporter
    if argv[0] == "-c":
        sys.argv, sys.path[0] = ["-c", *argv[2:]], ""
        # dont_inherit: this file's `from __future__` imports are not the code's
        return lambda: exec(compile(argv[1], "<string>", "exec", dont_inherit=True), main.__dict__), False
    if argv[0] == "-m":
        sys.argv, sys.path[0] = ["-m", *argv[2:]], os.getcwd()
        return lambda: runpy._run_module_as_main(argv[1]), False  # type: ignore[attr-defined]
    sys.argv = list(argv)
    path = os.path.join(os.getcwd(), argv[0])  # absolute as the interpreter makes it: not normalized
    if _importer(path):  # a folder or zip file with a __main__.py in it
        sys.path[0] = path
        return lambda: runpy._run_module_as_main("__main__", False), False  # type: ignore[attr-defined]
    sys.path[0] = os.path.dirname(os.path.realpath(path))

    def run_file() -> None:
        try:
            with open(path, "rb") as file:
                source = file.read()
        except OSError as error:
            sys.stderr.write(f"{sys.orig_argv[0]}: can't open file {path!r}: [Errno {error.errno}] "
                             f"{error.strerror}\n")  # fmt: skip
            raise SystemExit(2) from None
        main.__file__, main.__cached__ = path, None
        main.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
        exec(compile(source, path, "exec", dont_inherit=True), main.__dict__)

    return run_file, True


def _interpreter_options(argv: list[str]) -> list[str]:
    """`argv` past the interpreter's own `-u` (as torchrun starts its workers), which is applied."""
    if argv[:1] == ["-u"] or os.environ.get("PYTHONUNBUFFERED"):
        _unbuffered()
    return argv[1:] if argv[:1] == ["-u"] else argv


def _unbuffered() -> None:
    """`python -u`: stdout and stderr written through to their files at each write."""
    import io

    for name, fd in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        raw = io.FileIO(fd, "w", closefd=False)
        setattr(
            sys, name, io.TextIOWrapper(raw, encoding=old.encoding, errors=old.errors, write_through=True)
        )


def _importer(path: str) -> bool:
    """Whether `python PATH` runs PATH's `__main__` module: an import hook takes PATH (a folder, a
    zip file), as the interpreter asks."""
    for hook in sys.path_hooks:
        try:
            hook(path)
        except ImportError:
            continue
        return True
    return False


_FILE = __file__
_PYTHON = sys.executable  # the interpreter's own, which a run sees as the shim
_libc: Any = None  # the C library, whose stdio buffers a run's exit flushes (set in the zygote)


def _exit(request: dict) -> None:
    """Runs the request and ends the process as the interpreter ends: a script file's output flushed
    after its body; an uncaught exception through `sys.excepthook` (status 1, kept in `sys.last_*`),
    `SystemExit`'s status or message; then non-daemon threads joined, `atexit` run, standard streams
    flushed (status 120 if that fails), garbage collected, the run's own modules (`__main__` and
    what it imported) let go of as the interpreter's teardown does, so their objects' finalizers run
    in its order; C's stdio flushed; an uncaught `KeyboardInterrupt` ends it by SIGINT.
    What it skips is tearing down the preloaded modules, which would write to every page of the heap
    the run shares with its server (0.3-1.3 s of CPU a run)."""
    import atexit
    import threading
    import types
    import weakref

    main = types.ModuleType("__main__")
    code, interrupted, newest = _run(request, main)
    try:
        threading._shutdown()  # type: ignore[attr-defined]
    except BaseException as stopped:  # noqa: BLE001 - a KeyboardInterrupt while waiting for them
        _unraisable(stopped, threading)
    atexit._run_exitfuncs()
    failed = _flush_std_files()
    if gc.isenabled():
        gc.collect()
    # The interpreter's teardown of what is the run's own: what it kept in sys is dropped, then the
    # modules it imported and its __main__ are let go of, and the garbage that leaves collected.
    sys.last_type = sys.last_value = sys.last_traceback = None
    sys.stdin, sys.stdout, sys.stderr = sys.__stdin__, sys.__stdout__, sys.__stderr__
    for name in ["__main__", *_imported_after(newest)]:
        sys.modules[name] = None  # type: ignore[assignment]
    kept, main = weakref.ref(main), None
    gc.collect()
    if kept() is not None:  # something outside it still holds it: its namespace is cleared
        _clear_module(kept().__dict__)  # type: ignore[union-attr]
    failed = _flush_std_files() or failed
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    if _libc is not None:
        _libc.fflush(None)  # as exit() does
    os._exit(120 if failed else code & 0xFF)


def _run(request: dict, main: Any) -> tuple[int, bool, str]:
    """Runs the request in `main` up to where the interpreter's end begins; returns the status, whether
    a KeyboardInterrupt ended it, and the newest module before it ran."""
    body, script = _become(request, main)
    newest = next(reversed(sys.modules))
    error = None
    try:
        body()
    except BaseException as raised:  # noqa: BLE001 - the interpreter's own top level
        error = raised
    if script:  # the interpreter flushes after a script file (not -c or -m) before anything else
        _flush_io()
    code, interrupted = 0, isinstance(error, KeyboardInterrupt)
    if isinstance(error, SystemExit):
        code = _exit_status(error)
    elif error is not None:
        _excepthook(error)
        code = 1
    if script and not isinstance(error, SystemExit):  # a SystemExit ends the interpreter before this
        main.__dict__.pop("__file__", None)
        main.__dict__.pop("__cached__", None)
    del error  # its traceback's frames (their locals) are let go of now, as the interpreter does
    return code, interrupted, newest


def _imported_after(newest: str) -> list[str]:
    """The modules imported after `newest`, oldest first: read from the end of sys.modules, as a copy
    of all its names would write to (and so copy) the pages of the heap shared with the server."""
    names = []
    for name in reversed(sys.modules):
        if name == newest:
            return names[::-1]
        names.append(name)
    return []  # the run removed it: which are its own is not known


def _theirs(tb: Any) -> Any:
    """`tb` from its first frame outside this file, where the interpreter's own traceback starts."""
    while tb is not None and tb.tb_frame.f_code.co_filename == _FILE:
        tb = tb.tb_next
    return tb


def _flush_io() -> None:
    """Flushes sys.stderr, then sys.stdout, ignoring any error (or a missing stream)."""
    for name in ("stderr", "stdout"):
        with contextlib.suppress(BaseException):
            getattr(sys, name).flush()


def _exit_status(stop: SystemExit) -> int:
    """The status the interpreter ends with on `stop`: its int code taken as a C long (-1 if it does
    not fit), None as 0, anything else printed to stderr and 1."""
    code = stop.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if -(1 << 63) <= code < 1 << 63 else 0xFF
    tb = stop.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is not None and tb.tb_frame.f_code.co_name == "_run_module_as_main" and isinstance(code, str):
        code = code.replace(sys.executable, _PYTHON, 1)  # runpy's "No module named" names the interpreter
    with contextlib.suppress(Exception):
        print(code, file=sys.stderr)
    return 1


def _excepthook(error: BaseException) -> None:
    """Prints an uncaught exception as the interpreter does: from the run's own first frame, kept in
    `sys.last_*`, through `sys.excepthook`."""
    import traceback

    tb = _theirs(error.__traceback__)
    error.__traceback__ = tb
    sys.last_type, sys.last_value, sys.last_traceback = type(error), error, tb
    hook = getattr(sys, "excepthook", None)
    if hook is None:
        print("sys.excepthook is missing", file=sys.stderr)
        traceback.print_exception(error)
        return
    try:
        hook(type(error), error, tb)
    except Exception as failed:  # noqa: BLE001 - reported as the interpreter reports it
        print("Error in sys.excepthook:", file=sys.stderr)
        traceback.print_exception(failed.with_traceback(_theirs(failed.__traceback__)))
        print("\nOriginal exception was:", file=sys.stderr)
        traceback.print_exception(error)


class _Unraisable:
    """Its finalizer's error reaches `sys.unraisablehook` with the argument type Python does not name."""

    def __del__(self) -> None:
        raise RuntimeError


def _unraisable(error: BaseException, obj: object) -> None:
    """Reports `error` as the interpreter reports one it cannot raise: `sys.unraisablehook`, by
    default "Exception ignored in: OBJ" and the traceback."""
    caught: list = []
    hook, sys.unraisablehook = sys.unraisablehook, caught.append
    try:
        _Unraisable()
    finally:
        sys.unraisablehook = hook
    tb = _theirs(error.__traceback__)
    with contextlib.suppress(Exception):
        hook(type(caught[0])((type(error), error.with_traceback(tb), tb, None, obj)))


def _closed(stream: Any) -> bool:
    try:
        return bool(stream.closed)
    except Exception:  # noqa: BLE001 - none, or one that fails, is open to the interpreter
        return False


def _flush_std_files() -> bool:
    """Flushes sys.stdout and sys.stderr as the interpreter does at its end: one that is None or
    closed is skipped; a failure (reported for stdout) is returned, for the exit status 120."""
    failed = False
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name, None)
        if stream is None or _closed(stream):
            continue
        try:
            stream.flush()
        except BaseException as error:  # noqa: BLE001 - the interpreter reports it or not, and goes on
            failed = True
            if name == "stdout":
                _unraisable(error, stream)
    return failed


def _clear_module(namespace: dict) -> None:
    """Clears a module's namespace as the interpreter does at its end for a module still alive: the
    names with one leading underscore first, then all but `__builtins__` (each set to None)."""
    for first in (True, False):
        for name in list(namespace):
            if not isinstance(name, str) or namespace.get(name) is None:
                continue
            if (name[:1] == "_" and name[1:2] != "_") if first else name != "__builtins__":
                namespace[name] = None


class _Server:
    def __init__(self, python: str, preload: Sequence[str], env: Mapping[str, str]) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="script-server-"))
        self.proc = _fork_server(python, preload, env, self.folder)
        self.runs = 0
        self.key: tuple = ()

    def _line(self, timeout: float | None) -> str:
        assert self.proc.stdout is not None
        if timeout is not None and not select.select([self.proc.stdout], [], [], max(timeout, 0))[0]:
            return ""
        # unbuffered: a line read never takes the next one along, which select() would then not see
        line = self.proc.stdout.readline().decode()
        if not line:
            raise RuntimeError(f"script server exited ({self.proc.poll()})")
        return line

    def start(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> Started:
        self.runs += 1
        out, err = self.folder / f"{self.runs}.out", self.folder / f"{self.runs}.err"
        request = {
            "argv": list(argv),
            "cwd": str(cwd),
            "env": dict(env),
            "stdout": str(out),
            "stderr": str(err),
            "server": str(self.folder),
        }
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        return Started(self, argv, int(self._line(None).split()[1]), out, err)

    def run(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str], timeout: float | None):
        started = self.start(argv, cwd, env)
        try:
            started.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(started.pid, signal.SIGKILL)
            started.wait()
            raise subprocess.TimeoutExpired(
                list(argv), timeout or 0, started.stdout, started.stderr
            ) from None
        return subprocess.CompletedProcess(list(argv), started.returncode, started.stdout, started.stderr)

    def close(self) -> None:
        import shutil

        self.proc.stdin.close()  # the server's loop ends
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            signal.pidfd_send_signal(self.proc.pidfd, signal.SIGKILL)
            self.proc.wait()
        self.proc.close()
        shutil.rmtree(self.folder, ignore_errors=True)


class _Remote:
    """A server a zygote forked, as far as `_Server` uses a `subprocess.Popen` (the zygote, not this
    process, is its parent: it is watched through a pidfd, and its exit status is the zygote's)."""

    def __init__(self, pid: int, stdin: int, stdout: int) -> None:
        self.pid, self.pidfd, self.returncode = pid, os.pidfd_open(pid), None
        self.stdin, self.stdout = open(stdin, "wb", buffering=0), open(stdout, "rb", buffering=0)  # noqa: SIM115

    def poll(self) -> int | None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.wait(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self.pidfd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired("script server", timeout or 0)
            self.returncode = -1  # ended
        return self.returncode

    def close(self) -> None:
        self.stdout.close()
        os.close(self.pidfd)


def _fork_server(python: str, preload: Sequence[str], env: Mapping[str, str], folder: Path) -> _Remote:
    """A new server working in `folder`, forked by the session's zygote of this kind (started first
    if there is none: the first test process that asks starts it, the others wait for it)."""
    import socket

    key = json.dumps([python, list(preload), sorted(env.items())])
    address = Path(os.environ[SERVERS], hashlib.sha256(key.encode()).hexdigest()[:16] + ".sock")
    stdin, stdout = os.pipe(), os.pipe()
    try:
        for _ in range(2):  # a zygote that ended (or failed to import) is started again, once
            with _zygote_at(address, python, preload, env) as sock, contextlib.suppress(OSError):
                socket.send_fds(
                    sock, [json.dumps({"folder": str(folder)}).encode()], [stdin[0], stdout[1], 2]
                )
                answer = sock.recv(64).split()
                if answer[:1] == [b"pid"]:
                    remote = _Remote(int(answer[1]), stdin[1], stdout[0])
                    stdin, stdout = (stdin[0], -1), (-1, stdout[1])
                    return remote
        log = address.with_suffix(".log")
        raise RuntimeError(f"script server {preload} did not start: {log.read_text()[-3000:]}")
    finally:
        for fd in (*stdin, *stdout):
            if fd >= 0:
                os.close(fd)


_zygotes: list[subprocess.Popen] = []  # the ones this process started (their exit status is read here)


@contextlib.contextmanager
def _zygote_at(address: Path, python: str, preload: Sequence[str], env: Mapping[str, str]):
    """A connection to the zygote listening at `address`, which is started if none answers there."""
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        with open(address.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            try:
                sock.connect(str(address))
            except (FileNotFoundError, ConnectionRefusedError):
                address.unlink(missing_ok=True)
                home = address.with_suffix("")  # where it keeps what its imports printed
                home.mkdir(exist_ok=True)
                log = open(address.with_suffix(".log"), "ab")  # noqa: SIM115 - the child has it
                zygote = subprocess.Popen(
                    [python, __file__, str(address), *preload], env=dict(env), cwd=home,
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                )  # fmt: skip
                log.close()
                _zygotes.append(zygote)

                while not address.exists() and zygote.poll() is None:
                    select.select([], [], [], 0.01)
                sock.connect(str(address))  # it listens before it imports: the answer waits for them
        yield sock
    finally:
        sock.close()


def share_servers() -> None:
    """In pytest's controlling process: the session's folder of zygotes, which end with this process."""
    if SERVERS not in os.environ:
        folder = tempfile.mkdtemp(prefix="surge-servers-")
        Path(folder, "owner").write_text(str(os.getpid()))
        os.environ[SERVERS] = folder


def unshare_servers() -> None:
    import shutil

    folder = Path(os.environ.get(SERVERS, "/nonexistent"))
    if (folder / "owner").exists() and (folder / "owner").read_text() == str(os.getpid()):
        shutil.rmtree(folder, ignore_errors=True)
        del os.environ[SERVERS]


class Started:
    """A run forked from a server, as far as a test uses a `subprocess.Popen`: `pid` (also its process
    group: the run starts a session), `poll()`, `wait(timeout)`, `returncode`; `stdout` and `stderr`
    are the run's output, read once it ended."""

    def __init__(self, server: _Server, argv: Sequence[str], pid: int, out: Path, err: Path) -> None:
        self.server, self.args, self.pid, self._files = server, list(argv), pid, (out, err)
        self.returncode: int | None = None
        self.stdout = self.stderr = ""

    def poll(self) -> int | None:
        if self.returncode is None:
            line = self.server._line(0)
            if line:
                self._ended(line)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            line = self.server._line(timeout)
            if not line:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self._ended(line)
        assert self.returncode is not None
        return self.returncode

    def _ended(self, line: str) -> None:
        code, cpu = int(line.split()[1]), float(line.split()[2])
        global cpu_seconds
        cpu_seconds += cpu
        out, err = self._files
        self.stdout = out.read_text(errors="replace") if out.exists() else ""
        self.stderr = err.read_text(errors="replace") if err.exists() else ""
        out.unlink(missing_ok=True)
        err.unlink(missing_ok=True)
        self.returncode = code
        if _servers.setdefault(self.server.key, self.server) is not self.server:  # free for the next run
            self.server.close()  # another took its place meanwhile


_servers: dict[tuple, _Server] = {}
# CPU seconds of the runs forked so far (cpu_durations.py counts them as the test's children)
cpu_seconds = 0.0


def _server(python: str, env: Mapping[str, str], preload: Sequence[str]) -> _Server:
    """A free server of `python` that imported `preload` under `env` (less the `PER_RUN` variables):
    taken out of `_servers` while it runs something (`Started._ended` puts it back)."""
    start_env = {k: v for k, v in env.items() if k not in PER_RUN}
    key = (python, tuple(preload), tuple(sorted(start_env.items())))
    server = _servers.pop(key, None)
    if server is None or server.proc.poll() is not None:
        server = _Server(python, preload, start_env)
        server.key = key
    while len(_servers) >= MAX_SERVERS:
        _servers.pop(next(iter(_servers))).close()
    return server


def run(
    python: str,
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    preload: Sequence[str],
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run([python, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=...)`,
    run in a process forked from a server of `python` that imported `preload` under `env`."""
    if os.environ.get("SURGE_TEST_FORK") == "0":
        return subprocess.run(
            [python, *argv], cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=timeout
        )
    return _server(python, env, preload).run(argv, cwd, env, timeout)


def start(python: str, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], preload: Sequence[str]):
    """`subprocess.Popen([python, *argv], cwd=cwd, env=env, start_new_session=True, text=True)` with
    stdout and stderr captured (read once it ended), forked from a server as `run` does: a run a
    test signals or kills while it runs."""
    if os.environ.get("SURGE_TEST_FORK") == "0":
        return _Fresh([python, *argv], cwd=cwd, env=dict(env))
    return _server(python, env, preload).start(argv, cwd, env)


class _Fresh(subprocess.Popen):
    """`start` in a new interpreter (`SURGE_TEST_FORK=0`): `stdout`/`stderr` are the text once ended."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        self._files = (tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+"))  # noqa: SIM115 - read at the end
        super().__init__(args, cwd=cwd, env=env, start_new_session=True, stdout=self._files[0],
                         stderr=self._files[1], text=True)  # fmt: skip
        self.stdout = self.stderr = ""  # type: ignore[assignment]

    def wait(self, timeout: float | None = None) -> int:
        code = super().wait(timeout)
        self._read()
        return code

    def poll(self) -> int | None:
        code = super().poll()
        if code is not None:
            self._read()
        return code

    def _read(self) -> None:
        if self._files:
            for f in self._files:
                f.seek(0)
            self.stdout, self.stderr = (f.read() for f in self._files)  # type: ignore[assignment]
            for f in self._files:
                f.close()
            self._files = ()


if __name__ == "__main__":
    _request = _zygote(sys.argv[1], sys.argv[2:])
    if _request is None:
        sys.exit(0)
    del _zygote
    _exit(_request)
