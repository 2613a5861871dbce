"""What every multi-process strategy shares: ranks, the process group, collectives, tear-down.

DDP and FSDP differ only in how they wrap the module and write checkpoints; the process group is
started here (or joined when torchrun or SLURM started the processes).
"""

from __future__ import annotations

import atexit
import datetime
import gc
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from ..errors import MisconfigurationError, bad_value
from ..launch.call_site import check_same_trainer, trainer_call_site
from ..launch.environment import ClusterEnvironment
from ..launch.host import cpu_count
from ..launch.multiprocessing_launcher import MultiprocessingLauncher, is_interactive
from ..launch.subprocess_launcher import SubprocessLauncher
from ..rank_zero import warn
from ..seed import last_seeding, seed_everything
from .base import Layout, Strategy
from .collectives import gather_tensor, reduce_tensor
from .hang_watch import INTERVAL_S, HangWatch, group_store_address

RERUN = (
    "\nThis rank was started by an earlier Trainer(devices=N) of the script, which runs the script again from its "
    "start in each new rank: every rank must reach the same Trainer calls in the same order."
)
HUNG_GRACE_S = 2.0  # after a hang the other ranks are stuck or stopped: they get this long to end
RENDEZVOUS = datetime.timedelta(minutes=2)  # the least time ranks are given to meet
_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


class ProcessGroupStrategy(Strategy):
    """One process per device in a `torch.distributed` process group.

    Alone (no torchrun, no SLURM), the processes are started as `start_method` says: "popen" runs
    the script again for ranks 1..N-1 and this process is rank 0; "spawn", "fork" and "forkserver"
    start N ranks from inside each stage (`MultiprocessingLauncher`) and this process takes none.
    """

    start_method = "popen"  # a subclass that takes the argument sets it per object

    def __init__(
        self,
        *,
        timeout: datetime.timedelta | float | None = datetime.timedelta(minutes=30),
        process_group_backend: str | None = None,
    ) -> None:
        super().__init__()
        self.timeout = _timeout(timeout)
        self.backend = process_group_backend
        self.env = ClusterEnvironment(source="local")  # until `configure` is given the detected one
        self.launcher: SubprocessLauncher | MultiprocessingLauncher | None = None
        self.call_site: str | None = None  # the user's line that built this Trainer, compared across ranks
        self.wrapped: nn.Module | None = None
        self._owns_group = False
        self.hangs: HangWatch | None = None  # this rank's heartbeat, while the group lives
        self._hang_dir: Path | None = None
        self._hung = False  # a collective timed out: the peers' stacks are dumped, no grace at teardown
        self.failed_at: float | None = None  # when a failure began this rank's teardown (time.monotonic())

    # -- ranks -----------------------------------------------------------------------------
    @property
    def global_rank(self) -> int:  # type: ignore[override]
        return self.env.global_rank

    @property
    def local_rank(self) -> int:  # type: ignore[override]
        return self.env.local_rank

    @property
    def node_rank(self) -> int:  # type: ignore[override]
        return self.env.node_rank

    @property
    def world_size(self) -> int:  # type: ignore[override]
        return self.env.world_size

    @property
    def reducer(self) -> ProcessGroupStrategy:
        return self

    def check_layout(self, layout: Layout) -> None:
        self.configure(layout.processes_per_node, layout.num_nodes, layout.env)
        cores = cpu_count()
        if (
            layout.accelerator.name == "cpu"
            and layout.processes_per_node > cores
            and self.env.global_rank == 0
        ):
            warn(
                f"Trainer(devices={layout.processes_per_node}) on the CPU runs {layout.processes_per_node} processes "
                f"on a machine that gives this one {cores} CPU(s): they take turns on the cores, so the run is "
                f"slower than with devices={cores} (and collectives may time out); use devices<={cores}."
            )

    def configure(self, processes_per_node: int, num_nodes: int, env: ClusterEnvironment) -> None:
        """Check the launch environment `env` agrees with the devices and nodes asked for; plan a launch
        if this process is alone."""
        expected = processes_per_node * num_nodes
        self.env, self.call_site = env, trainer_call_site()
        if self.env.source == "local":
            if num_nodes > 1:
                raise MisconfigurationError(
                    f"num_nodes={num_nodes} needs a launcher that starts processes on every node: run under "
                    "torchrun (`surge launch`) or SLURM (`srun`)."
                )
            self.launcher = self._local_launcher(processes_per_node)
            self.env = ClusterEnvironment(source="surge", world_size=expected, local_world_size=expected)
        elif self.env.world_size != expected:
            raise MisconfigurationError(
                f"Trainer(devices={processes_per_node}, num_nodes={num_nodes}) expects {expected} processes, but the "
                f"{self.env.source} environment says WORLD_SIZE={self.env.world_size} (this is rank "
                f"{self.env.global_rank}, local rank {self.env.local_rank}, node {self.env.node_rank}); make them agree."
                + (RERUN if self.env.source == "surge" else "")
            )

    def _local_launcher(self, processes: int) -> SubprocessLauncher | MultiprocessingLauncher:
        """The launcher `start_method` names; in an interactive session only a fork can start ranks
        (there is no script to run again, and what a notebook defines does not unpickle elsewhere)."""
        if is_interactive() and self.start_method != "fork":
            raise MisconfigurationError(
                f"Trainer(strategy=...) with start_method={self.start_method!r} cannot start {processes} processes in "
                "an interactive session or notebook: run the code as a script, or choose a notebook-compatible "
                "strategy: Trainer(strategy='ddp_notebook') (start_method='fork')."
            )
        if self.start_method == "popen":
            return SubprocessLauncher(processes)
        return MultiprocessingLauncher(processes, self.start_method)

    @property
    def stage_launcher(self) -> MultiprocessingLauncher | None:
        """The launcher that starts the ranks of each stage from inside it (None: this process is a rank)."""
        return self.launcher if isinstance(self.launcher, MultiprocessingLauncher) else None

    def become_rank(self, env: ClusterEnvironment) -> None:
        """In a process a `MultiprocessingLauncher` started: this process is the rank `env` describes."""
        self.env, self.launcher = env, None

    # -- set-up ----------------------------------------------------------------------------
    def setup_environment(self, device: torch.device) -> None:
        self.device = device
        seeding = last_seeding()
        if seeding is not None and self.reseeds_ranks:
            # Lightning re-seeds every process from its last seed_everything as each stage sets up
            # its process group (fit, validate, test alike); its ranks draw from there.
            seed_everything(seeding.seed, seeding.workers)
        if not (dist.is_available() and dist.is_initialized()):
            self._start_group(device)
        if self.call_site is not None:  # once per Trainer: are all ranks at this one?
            sites: list[Any] = [None] * self.world_size
            dist.all_gather_object(sites, self.call_site)
            self.call_site = None
            check_same_trainer(sites)
        if self.hangs is None and self.world_size > 1:
            addr, port = group_store_address(self.env.master_addr, self.env.master_port)
            self.hangs = HangWatch(self.global_rank, self.world_size, addr, port, self._hang_dir)
            self.hangs.start()

    def dump_hangs_to(self, directory: Path) -> None:
        self._hang_dir = directory
        if self.hangs is not None:
            self.hangs.dump_into(directory)

    def _stop_watching(self) -> None:
        if self.hangs is not None:
            self.hangs.stop()
            self.hangs = None

    def _start_group(self, device: torch.device) -> None:
        launcher = self.launcher
        if isinstance(launcher, SubprocessLauncher) and not launcher.children and self.env.global_rank == 0:
            self.env = launcher.launch()
        backend = self.backend or ("nccl" if device.type == "cuda" else "gloo")
        # Ranks that start slowly (a busy host importing torch) must not fail a short `timeout=`,
        # which is meant for collectives: the rendezvous gets at least RENDEZVOUS, then the group
        # the asked timeout (where this torch can set it afterwards).
        settable = hasattr(dist.distributed_c10d, "_set_pg_timeout")
        dist.init_process_group(
            backend,
            rank=self.env.global_rank,
            world_size=self.env.world_size,
            timeout=max(self.timeout, RENDEZVOUS) if settable else self.timeout,
            init_method=self.env.init_method(),
        )
        if settable:
            dist.distributed_c10d._set_pg_timeout(self.timeout)
        self._owns_group = True
        # The group lives on for validate/test/predict after fit; at exit it must be destroyed, or
        # gloo's threads can abort the interpreter at shutdown ("terminate called without an active
        # exception"). Registered after the launcher's join, so it runs before it.
        atexit.register(self._destroy_at_exit)

    # -- collectives -----------------------------------------------------------------------
    # Each marks this rank's position (two attributes, for the heartbeat); left only on return, so
    # after a timeout the position still names the collective that timed out.
    def _enter(self, name: str) -> None:
        if self.hangs is not None:
            self.hangs.enter(name)

    def _leave(self) -> None:
        if self.hangs is not None:
            self.hangs.leave()

    def barrier(self, name: str | None = None) -> None:
        if dist.is_initialized():
            self._enter("barrier")
            dist.barrier()
            self._leave()

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """Rank `src`'s `obj` on every process (before the group exists: `obj` as it is)."""
        if not dist.is_initialized():
            return obj
        box = [obj]
        self._enter("broadcast")
        dist.broadcast_object_list(box, src=src)
        self._leave()
        return box[0]

    def all_reduce(self, tensor: Tensor, op: str = "sum") -> Tensor:
        out = tensor.detach().clone()
        if self._backend_name() == "gloo" and out.device.type != "cpu":
            out = out.cpu()
        self._enter("all_reduce")
        dist.all_reduce(out, op=_OPS[op])
        self._leave()
        return out

    def reduce(self, tensor: Any, group: Any = None, reduce_op: Any = "mean") -> Any:
        """Lightning's reduce: a tensor all-reduced in place ("mean" by default, or "sum", "max",
        a ReduceOp); anything else, or before the group exists, as it is."""
        if not isinstance(tensor, Tensor) or not dist.is_initialized():
            return tensor
        self._enter("reduce")
        out = reduce_tensor(tensor, group, reduce_op)
        self._leave()
        return out

    def all_gather(self, tensor: Tensor, group: Any = None, sync_grads: bool = False) -> Tensor:
        """Lightning's all_gather: every process's tensor stacked on a new first dimension."""
        if not dist.is_initialized():
            return tensor
        self._enter("all_gather")
        out = gather_tensor(tensor, group, sync_grads)
        self._leave()
        return out

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        """True when every process's `decision` is (with `all=False`: when any is)."""
        count = self.reduce(torch.tensor(int(decision), device=self.root_device), reduce_op="sum")
        return bool(count == self.world_size) if all else bool(count)

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int]:
        return {"num_replicas": self.num_nodes * self.num_processes, "rank": self.global_rank}

    @property
    def process_group_backend(self) -> str | None:
        """The backend asked for (None: nccl on CUDA, else gloo), or the group's once it exists."""
        return dist.get_backend() if dist.is_initialized() and self._owns_group else self.backend

    def mean(self, tensor: Tensor) -> Tensor:
        return self.all_reduce(tensor, "sum") / self.world_size

    def reduce_bool(self, flag: bool) -> bool:
        t = torch.tensor(float(flag), device=self.device if self._backend_name() != "gloo" else "cpu")
        self._enter("reduce_bool")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        self._leave()
        return bool(t.item())

    def all_gather_object(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        self._enter("all_gather_object")
        dist.all_gather_object(out, obj)
        self._leave()
        return out

    def _shard_problems(self, ckpt: dict[str, Any], path: str | Path) -> list[str]:
        # Each rank checks its share of the shard files; every rank learns every problem, so all
        # of them refuse together.
        from ..checkpoint.shard_files import verify_shards

        mine = verify_shards(ckpt, path, self.global_rank, self.world_size)
        return [p for part in self.all_gather_object(mine) for p in part]

    def _backend_name(self) -> str:
        return dist.get_backend() if dist.is_initialized() else "gloo"

    def explain_failure(self, err: BaseException) -> None:
        """Add a note to a collective timeout: which collective, which rank waited, which rank
        stopped and where (every live rank's stacks are dumped to the run directory's hang/).

        A timeout is known from the collective, never from the error's wording: the error was
        raised by a collective (torch.distributed's code, or DDP's gradient allreduce at the end
        of backward), and that collective waited its own timeout (torch's flight recorder; without
        one, surge's own collective as its heartbeat saw it)."""
        if not (_raised_by_collective(err) and self._waited_timeout()):
            return
        collective = _collective_of(err)
        peers = [r for r in range(self.world_size) if r != self.global_rank]
        whom = f"rank {peers[0]}" if len(peers) == 1 else f"one of ranks {peers}"
        found = f"{whom} stopped answering (hung, or too slow)"
        if self.hangs is not None and (collective != "a collective" or isinstance(err, dist.DistError)):
            from .hang_report import explain_hang

            collective, found = explain_hang(self.hangs, err, collective)
            self._hung = True
        note = (
            f"surge: rank {self.global_rank} waited more than the process group timeout "
            f"({self.timeout.total_seconds():g} s) in {collective}: {found} The job is being stopped. "
            "Raise the strategy's timeout= if steps legitimately take longer."
        )
        if hasattr(err, "add_note"):
            err.add_note(note)

    def _waited_timeout(self) -> bool:
        from .hang_dump import overdue_collective

        overdue = overdue_collective()
        if overdue is not None:
            return overdue
        return self.hangs is not None and self.hangs.waited_s() >= self.timeout.total_seconds() - INTERVAL_S

    # -- tear-down -------------------------------------------------------------------------
    def _destroy_at_exit(self) -> None:
        # A wrapper (DDP's reducer, FSDP's state) holds the process group: drop it first, so the
        # group (and its gloo threads) is really freed here rather than during interpreter
        # shutdown, where a still-joinable thread aborts the process.
        self.wrapped = None
        self._stop_watching()
        gc.collect()
        if self._owns_group and dist.is_initialized():
            dist.destroy_process_group()
            self._owns_group = False

    def teardown(self, failed: bool = False) -> None:
        if failed and self.failed_at is None:  # before the group ends: a peer fails only after this
            self.failed_at = time.monotonic()
        self._stop_watching()
        if failed and isinstance(self.launcher, SubprocessLauncher):
            self.launcher.terminate(grace=HUNG_GRACE_S if self._hung else 10.0)
        if self._owns_group and dist.is_initialized():
            if not failed:
                dist.barrier()
            dist.destroy_process_group()
            self._owns_group = False


_COLLECTIVES = {
    "reduce_bool": "the all_reduce by which ranks agree to stop",
    "broadcast": "a broadcast",
    "barrier": "a barrier",
    "all_gather_object": "an all_gather",
    "all_gather": "an all_gather",
    "reduce": "a reduce",
    "all_reduce": "an all_reduce of logged metrics",
    "save_sharded": "the sharded checkpoint save",
    "_engine_run_backward": "the gradient allreduce during backward",
}


def _timeout(value: Any) -> datetime.timedelta:
    """`timeout=` as a timedelta (a number: seconds; None: the default, 30 minutes), refused unless positive."""
    if value is None:
        return datetime.timedelta(minutes=30)
    number = isinstance(value, int | float) and not isinstance(value, bool)
    delta = datetime.timedelta(seconds=value) if number else value
    if not isinstance(delta, datetime.timedelta) or delta.total_seconds() <= 0:
        raise bad_value(
            "timeout", value, "a positive datetime.timedelta or number of seconds (None: 30 minutes)"
        )
    return delta


_DISTRIBUTED = os.path.dirname(os.path.abspath(dist.__file__)) + os.sep


def _raised_by_collective(err: BaseException) -> bool:
    """Whether `err` came out of a collective: its innermost frame is torch.distributed's code, or
    autograd's engine (DDP's gradient allreduce is waited for at the end of backward)."""
    tb = err.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    return code.co_name == "_engine_run_backward" or _DISTRIBUTED in os.path.abspath(code.co_filename)


def _collective_of(err: BaseException) -> str:
    """The innermost surge or autograd call in the traceback that names a collective."""
    found = "a collective"
    tb = err.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_name
        if name in _COLLECTIVES and (found == "a collective" or name != "all_reduce"):
            found = _COLLECTIVES[name]
        tb = tb.tb_next
    return found
