"""Writing (and submitting) a SLURM batch script for a surge training script."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import bad_value

_TIME = re.compile(r"^(\d+-)?\d{1,3}(:\d{2}){0,2}$")
# What an #SBATCH line may carry unquoted: no space, quote, newline or other control character (a
# newline in a value would end the directive and start a command of the batch script).
_WORD = re.compile(r"^[A-Za-z0-9_.+,%@=:/-]+$")


@dataclass(kw_only=True)
class SbatchJob:
    """One task per GPU (or `tasks_per_node` CPU processes), preemption-ready: SLURM sends SIGUSR1
    90 s before the time limit and may requeue the job; surge's `ckpt_path="auto"` resumes it."""

    script: str
    args: Sequence[str] = field(default_factory=list)
    nodes: int = 1
    gpus_per_node: int = 0
    tasks_per_node: int | None = None
    cpus_per_task: int | None = None
    time: str = "01:00:00"
    partition: str | None = None
    job_name: str | None = None
    output: str = "surge-%j.out"
    python: str = sys.executable

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise bad_value("--nodes", self.nodes, "an int >= 1")
        if self.gpus_per_node < 0:
            raise bad_value("--gpus-per-node", self.gpus_per_node, "an int >= 0")
        if self.tasks_per_node is None:
            self.tasks_per_node = self.gpus_per_node or 1
        if self.tasks_per_node < 1:
            raise bad_value("--tasks-per-node", self.tasks_per_node, "an int >= 1")
        if not _TIME.match(self.time):
            raise bad_value("--time", self.time, 'SLURM time such as "02:00:00", "90" or "1-12:00:00"')
        for arg, value in (
            ("--job-name", self.job_name),
            ("--partition", self.partition),
            ("--output", self.output),
        ):
            if value is not None and not _WORD.match(value):
                raise bad_value(
                    arg,
                    value,
                    "letters, digits and _.+,%@=:/- only (no space, quote, newline or control character)",
                )

    def render(self) -> str:
        name = self.job_name or re.sub(r"[^A-Za-z0-9_.+-]", "_", f"surge-{Path(self.script).stem}")
        lines = [
            "#!/bin/bash",
            f"#SBATCH --job-name={name}",
            f"#SBATCH --nodes={self.nodes}",
            f"#SBATCH --ntasks-per-node={self.tasks_per_node}",
            f"#SBATCH --time={self.time}",
            f"#SBATCH --output={self.output}",
            "#SBATCH --open-mode=append",
            "#SBATCH --signal=USR1@90",
            "#SBATCH --requeue",
        ]
        if self.gpus_per_node:
            lines.append(f"#SBATCH --gpus-per-node={self.gpus_per_node}")
        if self.cpus_per_task:
            lines.append(f"#SBATCH --cpus-per-task={self.cpus_per_task}")
        if self.partition:
            lines.append(f"#SBATCH --partition={self.partition}")
        command = " ".join(shlex.quote(part) for part in [self.python, self.script, *self.args])
        lines += [
            "",
            "# One task per device; surge reads SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and SLURM_NODELIST.",
            f"srun {command}",
            "",
        ]
        return "\n".join(lines)

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(self.render())
        path.chmod(0o755)
        return path


def submit(path: str | Path) -> str:
    """`sbatch path`; returns the job id."""
    done = subprocess.run(["sbatch", "--parsable", str(path)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"sbatch {path} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout.strip().split(";")[0]
