"""Lightning's cluster environments (`lightning.pytorch.plugins.environments`), each standing for
surge's own: where the ranks come from (`surge.launch.environment.ClusterEnvironment`) and which
signal requeues a SLURM job (`RequeuePolicy`), decided once when the Trainer is built.

The built-in ones name an environment surge already reads (torchrun's, SLURM's, Kubeflow's
variables, or its own launcher) and report surge's reading of it; a subclass of `ClusterEnvironment`
of your own gives surge its ranks and meeting address through its methods.
"""

from __future__ import annotations

import os
import signal
from abc import ABC, abstractmethod
from typing import Any

from ...arguments.plugins import Plugins
from ...errors import MisconfigurationError
from ...launch import environment as surge_env
from ...launch.signals import RequeuePolicy

KIND = "ClusterEnvironment"


class ClusterEnvironment(ABC):
    """Lightning's base: subclass it to describe a cluster whose processes something else starts
    (`creates_processes_externally` True) and whose ranks your methods read."""

    plugin_kind = KIND

    @property
    @abstractmethod
    def creates_processes_externally(self) -> bool:
        """Whether the cluster starts the processes (True), or the Trainer must."""

    @property
    @abstractmethod
    def main_address(self) -> str:
        """Where rank zero listens for the process group."""

    @property
    @abstractmethod
    def main_port(self) -> int:
        """The port rank zero listens on."""

    @staticmethod
    @abstractmethod
    def detect() -> bool:
        """Whether this process runs in such an environment."""

    @abstractmethod
    def world_size(self) -> int: ...

    @abstractmethod
    def set_world_size(self, size: int) -> None: ...

    @abstractmethod
    def global_rank(self) -> int: ...

    @abstractmethod
    def set_global_rank(self, rank: int) -> None: ...

    @abstractmethod
    def local_rank(self) -> int: ...

    @abstractmethod
    def node_rank(self) -> int: ...

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:  # noqa: B027 - optional
        """Lightning checks the Trainer's devices against the environment here; surge checks that
        devices x num_nodes is the environment's world size itself."""

    def teardown(self) -> None:  # noqa: B027 - optional, as Lightning's
        """Clean up what the environment set."""

    def surge_plugin(self) -> Plugins:
        """Your environment's ranks and address, read once, as surge's environment."""
        return Plugins(environment=from_methods(self), kinds=(KIND,))


def from_methods(env: ClusterEnvironment) -> surge_env.ClusterEnvironment:
    """surge's environment from a `ClusterEnvironment`'s methods (read once, at the Trainer)."""
    world = env.world_size()
    if not env.creates_processes_externally and world > 1:
        raise MisconfigurationError(
            f"plugins=[{type(env).__name__}()]: creates_processes_externally is False with world_size()={world}, "
            "so the Trainer would have to start the processes with your ranks; surge's launcher starts them "
            "with its own. Start them yourself (srun, torchrun, mpirun) and return True, or drop the plugin "
            "and pass devices=N."
        )
    return surge_env.ClusterEnvironment(
        source="plugin", world_size=world, global_rank=env.global_rank(), local_rank=env.local_rank(),
        node_rank=env.node_rank(), local_world_size=world, master_addr=env.main_address,
        master_port=int(env.main_port),
    )  # fmt: skip


class _Detected(ClusterEnvironment):
    """An environment surge reads itself (`surge.launch.environment.detect`): its methods report
    that reading, so what the script sees is what surge uses."""

    def __init__(self) -> None:
        self._world_size: int | None = None
        self._global_rank: int | None = None

    @staticmethod
    def _env() -> surge_env.ClusterEnvironment:
        return surge_env.detect()

    @property
    def creates_processes_externally(self) -> bool:
        return self._env().source in ("torchrun", "slurm")

    @property
    def main_address(self) -> str:
        return self._env().master_addr

    @property
    def main_port(self) -> int:
        return self._env().master_port

    @staticmethod
    def detect() -> bool:
        return True

    def world_size(self) -> int:
        return self._world_size if self._world_size is not None else self._env().world_size

    def set_world_size(self, size: int) -> None:
        self._world_size = size

    def global_rank(self) -> int:
        return self._global_rank if self._global_rank is not None else self._env().global_rank

    def set_global_rank(self, rank: int) -> None:
        self._global_rank = rank

    def local_rank(self) -> int:
        return self._env().local_rank

    def node_rank(self) -> int:
        return self._env().node_rank

    def surge_plugin(self) -> Plugins:
        return Plugins(kinds=(KIND,))  # surge's own detection, as without the plugin


class LightningEnvironment(_Detected):
    """The default: surge's launcher (devices=N), or the variables a launcher set."""


class TorchElasticEnvironment(_Detected):
    """torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT), as surge reads them."""

    @staticmethod
    def detect() -> bool:
        return all(v in os.environ for v in ("RANK", "GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"))


class KubeflowEnvironment(_Detected):
    """Kubeflow's PyTorchJob variables (WORLD_SIZE, RANK, MASTER_ADDR/PORT): torchrun's, to surge."""

    @staticmethod
    def detect() -> bool:
        names = ("KUBERNETES_PORT", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")
        return all(v in os.environ for v in names)


class SLURMEnvironment(_Detected):
    """SLURM's variables as surge reads them (inside `srun`), and the requeue policy: on
    `requeue_signal` (SIGUSR1 by default) a checkpoint, `scontrol requeue`, exit; with
    `auto_requeue=False` no handler for that signal at all, as Lightning."""

    def __init__(self, auto_requeue: bool = True, requeue_signal: signal.Signals | None = None) -> None:
        super().__init__()
        self.auto_requeue = auto_requeue
        self.requeue_signal = signal.SIGUSR1 if requeue_signal is None else requeue_signal

    @staticmethod
    def detect() -> bool:
        return "SLURM_NTASKS" in os.environ and SLURMEnvironment.job_name() not in ("bash", "interactive")

    @staticmethod
    def job_name() -> str | None:
        return os.environ.get("SLURM_JOB_NAME")

    @staticmethod
    def job_id() -> int | None:
        job = os.environ.get("SLURM_JOB_ID")
        return int(job) if job is not None and job.isdigit() else None

    def surge_plugin(self) -> Plugins:
        requeue = RequeuePolicy(self.requeue_signal if self.auto_requeue else None)
        return Plugins(requeue=requeue, kinds=(KIND,))


class _Refused(ClusterEnvironment):
    """A Lightning environment surge cannot honour: importable, refused when built."""

    reason = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise MisconfigurationError(f"{type(self).__name__} is not supported by surge: {self.reason}")


class LSFEnvironment(_Refused):
    reason = (
        "surge reads no LSF variables (LSB_*, JSM_NAMESPACE_*). Start the ranks with torchrun (`surge launch`) "
        "inside the LSF job, or pass plugins=[<your ClusterEnvironment subclass>] that reads them."
    )


class MPIEnvironment(_Refused):
    reason = (
        "surge does not use mpi4py. Run the ranks under torchrun (`surge launch`), or pass "
        "plugins=[<your ClusterEnvironment subclass>] reading mpirun's variables (OMPI_COMM_WORLD_RANK, ...)."
    )


class XLAEnvironment(_Refused):
    reason = "surge has no TPU/XLA support; use accelerator='cuda' or 'cpu'."


# Abstract methods each refused class would otherwise need before its __init__ runs.
for _cls in (LSFEnvironment, MPIEnvironment, XLAEnvironment):
    _cls.__abstractmethods__ = frozenset()

__all__ = [
    "ClusterEnvironment",
    "KubeflowEnvironment",
    "LSFEnvironment",
    "LightningEnvironment",
    "MPIEnvironment",
    "SLURMEnvironment",
    "TorchElasticEnvironment",
    "XLAEnvironment",
]
