"""A real one-node SLURM cluster on this machine, from Debian's packages, for the SLURM tests.

`SlurmCluster.start()` (slurm and munge installed first by .ci/run, `--install`; a test without them skips) starts a
private munged, slurmctld and slurmd (their own ports, munge socket, config, state, spool and logs in
one /tmp/surge-slurm-* directory; SLURM_CONF points commands at its slurm.conf), waits until `sinfo`
shows the node idle, and `stop()` kills them and everything they started. Nothing here touches a
system-wide SLURM or munge set-up: another cluster (another test session) can run beside this one.

A session killed before its teardown leaves its daemons behind; the next `start()` (or
`python tests/distributed/slurm_cluster.py --cleanup`) kills the clusters whose owning process is gone.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

PACKAGES = ["slurm-wlm", "munge"]
SBIN = ("/usr/sbin", "/sbin", "/usr/local/sbin")


class InstallError(RuntimeError):
    """apt-get could not install slurm/munge (no network, no root, no apt): the only reason to skip."""


def _which(name: str) -> str | None:
    path = os.pathsep.join([os.environ.get("PATH", ""), *SBIN])
    return shutil.which(name, path=path)


TOOLS = ("slurmctld", "slurmd", "srun", "sbatch", "munged")
INSTALL_HINT = (
    "slurm-wlm and munge are not installed: .ci/run installs them before the tests "
    "(by hand, as root: python tests/distributed/slurm_cluster.py --install)"
)


def require_installed() -> None:
    """Tests never install system packages: without SLURM's tools this raises InstallError (a skip)."""
    missing = [tool for tool in TOOLS if not _which(tool)]
    if missing:
        raise InstallError(f"{INSTALL_HINT}; missing: {missing}")


def ensure_installed(timeout: float = 900) -> None:
    """`apt-get install slurm-wlm munge` unless slurmctld, slurmd, srun and munged are all there
    (CI's set-up, `--install`; never from inside a test)."""
    if all(_which(tool) for tool in TOOLS):
        return
    if shutil.which("apt-get") is None:
        raise InstallError("slurmctld is not installed and there is no apt-get to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]
    done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:  # a fresh image has no package lists yet
        update = subprocess.run(
            ["apt-get", "update", "-q"], env=env, capture_output=True, text=True, timeout=timeout
        )
        if update.returncode != 0:
            raise InstallError(
                f"apt-get update failed ({update.returncode}): {update.stderr.strip()[-1500:]}"
            )
        done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise InstallError(f"{' '.join(install)} failed ({done.returncode}): {done.stderr.strip()[-1500:]}")
    missing = [tool for tool in ("slurmctld", "slurmd", "srun", "sbatch", "munged") if not _which(tool)]
    if missing:
        raise InstallError(f"apt-get installed {PACKAGES} but {missing} are still missing")


WORKDIR_PREFIX = "surge-slurm-"


def _carrying(conf: Path) -> list[psutil.Process]:
    """Processes (not this one) whose environment has SLURM_CONF=conf."""
    mine = f"SLURM_CONF={conf}".encode()
    found = []
    for p in psutil.process_iter():
        if p.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error, OSError):
            if mine in Path(f"/proc/{p.pid}/environ").read_bytes().split(b"\0"):
                found.append(p)
    return found


def _owner_alive(workdir: Path) -> bool:
    try:
        pid, created = (workdir / "owner").read_text().split()
        return abs(psutil.Process(int(pid)).create_time() - float(created)) < 1
    except (OSError, ValueError, psutil.Error):
        return False


def cleanup_stale() -> list[str]:
    """Kill the daemons and jobs of clusters whose owning process has died; remove their directories."""
    killed = []
    for workdir in Path("/tmp").glob(f"{WORKDIR_PREFIX}*"):
        if not workdir.is_dir() or _owner_alive(workdir):
            continue
        for p in _carrying(workdir / "slurm.conf"):
            with contextlib.suppress(psutil.Error):
                killed.append(f"{p.pid} {' '.join(p.cmdline())[:200]}")
                p.kill()
        shutil.rmtree(workdir, ignore_errors=True)
    return killed


MUNGE_KEY = Path("/etc/munge/munge.key")


def ensure_munge_key(key: Path = MUNGE_KEY) -> Path:
    """The machine's munge key, created (1 KiB of random bytes, mode 0400) when missing."""
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True)
        mungekey = _which("mungekey")
        if mungekey:
            subprocess.run([mungekey, "--create", f"--keyfile={key}"], check=True, capture_output=True)
        else:
            key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
    return key


@dataclass
class SlurmCluster:
    """A running one-node cluster; `env()` is what a command needs to talk to it."""

    workdir: Path
    conf: Path
    node: str
    cpus: int
    daemons: dict[str, subprocess.Popen] = field(default_factory=dict)

    # -- start / stop -----------------------------------------------------------------------------
    @classmethod
    def start(cls, timeout: float = 60) -> SlurmCluster:
        """Start the daemons (SLURM must be installed: `require_installed`); `timeout` bounds the start."""
        require_installed()
        cleanup_stale()
        node = socket.gethostname().split(".")[0]
        try:  # jobs get MASTER_ADDR=<node> from SLURM_NODELIST: it must resolve
            socket.gethostbyname(node)
        except OSError as err:
            raise RuntimeError(
                f"this machine's hostname {node!r} does not resolve ({err}); add it to /etc/hosts"
            ) from err
        cpus = len(os.sched_getaffinity(0))
        # Everything under one short /tmp directory (munge's socket path must fit in sun_path).
        workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX, dir="/tmp"))
        (workdir / "owner").write_text(f"{os.getpid()} {psutil.Process().create_time()}")
        cluster = cls(workdir=workdir, conf=workdir / "slurm.conf", node=node, cpus=cpus)
        try:
            cluster._start(timeout)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _start(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        d = self.workdir
        for sub in ("state", "spool", "munge"):
            (d / sub).mkdir()
        (d / "munge").chmod(0o755)
        key = ensure_munge_key()
        socket_path = d / "munge" / "munge.socket"
        self._daemon(
            "munged",
            [_which("munged"), "--foreground", "--force", f"--socket={socket_path}", f"--key-file={key}",
             f"--pid-file={d / 'munge' / 'munged.pid'}", f"--log-file={d / 'munged.log'}",
             f"--seed-file={d / 'munge' / 'munged.seed'}", "--num-threads=2"],
        )  # fmt: skip
        self._wait(lambda: socket_path.exists(), deadline, "munged to open its socket")
        from ports import free_port  # tests/: ports no other test process is given meanwhile

        ctld_port, slurmd_port = free_port(), free_port()
        self.conf.write_text(
            self._config(socket_path=socket_path, ctld_port=ctld_port, slurmd_port=slurmd_port)
        )
        self._daemon("slurmctld", [_which("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        self._wait(lambda: self.sinfo() is not None, deadline, "slurmctld to answer sinfo")
        self._daemon("slurmd", [_which("slurmd"), "-D", "-N", self.node, "-f", str(self.conf)])
        self._wait(lambda: self.sinfo() == "idle", deadline, f"node {self.node} to be idle")

    def _config(self, *, socket_path: Path, ctld_port: int, slurmd_port: int) -> str:
        d = self.workdir
        first_job = random.randrange(1, 15000)  # another cluster on this machine: other MASTER_PORTs
        return "\n".join([
            "ClusterName=surgetest",
            f"SlurmctldHost={self.node}(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={slurmd_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={socket_path}",
            "MpiDefault=none",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/builtin",
            "ReturnToService=2",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            f"FirstJobId={first_job}",
            "MinJobAge=600",
            "KillWait=5",
            "InactiveLimit=0",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=30",
            f"StateSaveLocation={d / 'state'}",
            f"SlurmdSpoolDir={d / 'spool'}",
            f"SlurmctldPidFile={d / 'slurmctld.pid'}",
            f"SlurmdPidFile={d / 'slurmd.pid'}",
            f"SlurmctldLogFile={d / 'slurmctld.log'}",
            f"SlurmdLogFile={d / 'slurmd.log'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory=1000 State=UNKNOWN",
            f"PartitionName=debug Nodes={self.node} Default=YES MaxTime=10 State=UP",
            "",
        ])  # fmt: skip

    def _daemon(self, name: str, argv: Sequence[str | None]) -> None:
        with open(self.workdir / f"{name}.out", "w") as out:
            self.daemons[name] = subprocess.Popen(
                [str(a) for a in argv], env=self.env(), stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.workdir,
            )  # fmt: skip

    def _wait(self, ready, deadline: float, what: str) -> None:
        while time.monotonic() < deadline:
            for name, proc in self.daemons.items():
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited with {proc.returncode} while waiting for {what}:\n{self.logs()}"
                    )
            if ready():
                return
            time.sleep(0.2)
        raise TimeoutError(f"timed out waiting for {what}:\n{self.logs()}")

    def stop(self) -> list[str]:
        """Cancel every job, stop the daemons, kill whatever they left; returns what had to be killed."""
        if "slurmctld" in self.daemons and self.daemons["slurmctld"].poll() is None:
            with contextlib.suppress(Exception):
                self.run(["scancel", "--full", "--partition=debug"], timeout=10)
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.daemons.get(name)
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        killed = []
        for p in self.leftovers():  # slurmstepd and job tasks are reparented to init, not below slurmd
            with contextlib.suppress(psutil.Error):
                killed.append(f"{p.pid} {' '.join(p.cmdline())[:200]}")
                p.kill()
        return killed

    def leftovers(self) -> list[psutil.Process]:
        """Processes that carry this cluster's SLURM_CONF: the daemons, slurmstepd, job tasks."""
        return _carrying(self.conf)

    # -- using it ---------------------------------------------------------------------------------
    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = str(self.conf)
        env["PATH"] = os.pathsep.join([env.get("PATH", ""), *SBIN])
        return env

    def run(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 30, **kw):
        return subprocess.run(
            list(argv), env=self.env(env), capture_output=True, text=True, timeout=timeout, **kw
        )

    def sinfo(self) -> str | None:
        """The node's state ("idle", "alloc", "down"...), or None while slurmctld does not answer."""
        try:
            done = self.run(["sinfo", "-h", "-N", "-n", self.node, "-o", "%t"], timeout=10)
        except subprocess.TimeoutExpired:
            return None
        return (
            done.stdout.strip().rstrip("*~#!%$@^-") if done.returncode == 0 and done.stdout.strip() else None
        )

    def job_state(self, job_id: str) -> str | None:
        """PENDING, RUNNING, COMPLETED, FAILED... from slurmctld (there is no accounting for sacct)."""
        done = self.run(["scontrol", "-o", "show", "job", job_id], timeout=10)
        for part in done.stdout.split():
            if part.startswith("JobState="):
                return part.split("=", 1)[1]
        return None

    def logs(self, tail: int = 2500) -> str:
        parts = []
        for name in (
            "munged.log",
            "munged.out",
            "slurmctld.log",
            "slurmctld.out",
            "slurmd.log",
            "slurmd.out",
        ):
            path = self.workdir / name
            if path.exists():
                parts.append(f"--- {name}\n{path.read_text(errors='replace')[-tail:]}")
        return "\n".join(parts)


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--install"]:
        ensure_installed()
        raise SystemExit(0)
    if sys.argv[1:] != ["--cleanup"]:
        raise SystemExit("usage: python slurm_cluster.py --cleanup | --install")
    for line in cleanup_stale():
        print(f"killed {line}")
