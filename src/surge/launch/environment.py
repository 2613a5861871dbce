"""Where ranks come from: torchrun's variables, SLURM's, or nothing (a single process).

One small dataclass holds the rank arithmetic; every other part reads it, none recomputes it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class ClusterEnvironment:
    """The process's place in the job."""

    source: str  # "local", "torchrun", "slurm", "surge" (its own launcher), "plugin" (a ClusterEnvironment's)
    world_size: int = 1
    global_rank: int = 0
    local_rank: int = 0
    node_rank: int = 0
    local_world_size: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int = 29500

    @property
    def num_nodes(self) -> int:
        return max(1, self.world_size // max(1, self.local_world_size))

    def variables(self) -> dict[str, str]:
        """This environment as the variables `detect` reads back (what a started rank is given)."""
        out = {
            "MASTER_ADDR": self.master_addr, "MASTER_PORT": str(self.master_port), "WORLD_SIZE": str(self.world_size),
            "RANK": str(self.global_rank), "LOCAL_RANK": str(self.local_rank), "NODE_RANK": str(self.node_rank),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
        }  # fmt: skip
        if self.source == "surge":
            out["SURGE_LAUNCHED"] = "1"
        return out

    def init_method(self) -> str:
        """Where the process group meets: torchrun's variables (its agent may share its store), else
        this environment's address, given explicitly."""
        if self.source == "torchrun":
            return "env://"
        host = f"[{self.master_addr}]" if ":" in self.master_addr else self.master_addr
        return f"tcp://{host}:{self.master_port}"


def detect(env: Mapping[str, str] | None = None) -> ClusterEnvironment:
    """The environment this process runs in; torchrun (or surge's launcher) first, then SLURM.

    The Trainer calls it once, at construction, and hands the result to the parts that need it.
    """
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env and "MASTER_ADDR" in env:
        world = int(env["WORLD_SIZE"])
        local_world = int(env.get("LOCAL_WORLD_SIZE", world))
        return ClusterEnvironment(
            source="surge" if env.get("SURGE_LAUNCHED") == "1" else "torchrun",
            world_size=world, global_rank=int(env["RANK"]), local_rank=int(env.get("LOCAL_RANK", 0)),
            node_rank=int(env.get("GROUP_RANK", env.get("NODE_RANK", 0))), local_world_size=local_world,
            master_addr=env["MASTER_ADDR"], master_port=int(env.get("MASTER_PORT", 29500)),
        )  # fmt: skip
    if (
        # Only inside a job step (srun): a batch script's own shell also has SLURM_PROCID=0 and
        # SLURM_NTASKS=N, but no peers will ever join it.
        "SLURM_STEP_ID" in env
        and "SLURM_NTASKS" in env
        and "SLURM_PROCID" in env
        and env.get("SLURM_JOB_NAME") not in ("bash", "interactive")
    ):
        world = int(env["SLURM_NTASKS"])
        nodes = int(env.get("SLURM_NNODES", env.get("SLURM_JOB_NUM_NODES", 1)))
        job = int(env.get("SLURM_JOB_ID", "0") or 0)
        return ClusterEnvironment(
            source="slurm", world_size=world, global_rank=int(env["SLURM_PROCID"]),
            local_rank=int(env.get("SLURM_LOCALID", 0)), node_rank=int(env.get("SLURM_NODEID", 0)),
            local_world_size=max(1, world // max(1, nodes)),
            master_addr=env.get("MASTER_ADDR") or first_host(env.get("SLURM_NODELIST", "127.0.0.1")),
            master_port=int(env.get("MASTER_PORT", 15000 + job % 20000)),
        )  # fmt: skip
    return ClusterEnvironment(source="local")


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list such as "gpu[003-005,009],cpu01" (here "gpu003")."""
    match = re.match(r"^([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not match:
        return nodelist
    prefix, ranges = match.group(1), match.group(2)
    if ranges is None:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first
