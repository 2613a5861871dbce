"""The `surge` command's top level: its subcommands and their arguments. Nothing here imports torch,
so `surge --help`, `surge --version` and a mistyped command answer at once; each command imports
what it runs. The parts it shares with Lightning's `LightningCLI` are in `src/surge/stage_cli/`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ..rank_zero import info
from ..stage_cli.commands import COMMANDS, add_export_command
from ..version import __version__

_OWN_PARSER = ("demo", "fit", "validate", "test", "predict")


def _launch(args: argparse.Namespace) -> int:
    from torch.distributed import run as torchrun

    argv = [
        f"--nproc-per-node={args.nproc_per_node}", f"--nnodes={args.nnodes}", f"--node-rank={args.node_rank}",
        f"--master-addr={args.master_addr}", f"--master-port={args.master_port}",
        f"--max-restarts={args.max_restarts}",
    ]  # fmt: skip
    # Always the c10d rendezvous: torchrun's static one keeps a store across restarts in which a
    # restarted group finds its dead predecessor's addresses ("Connection refused", or a hang).
    endpoint = args.rdzv_endpoint or f"{args.master_addr}:{args.master_port}"
    argv += ["--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={args.rdzv_id}"]
    # c10d restarts otherwise reuse the closed TCP store of the failed attempt.
    os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    torchrun.main([*argv, args.script, *args.script_args])
    return 0


def _slurm(args: argparse.Namespace) -> int:
    from ..launch.sbatch import SbatchJob, submit

    job = SbatchJob(
        script=args.script, args=args.script_args, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
        tasks_per_node=args.tasks_per_node, cpus_per_task=args.cpus_per_task, time=args.time,
        partition=args.partition, job_name=args.job_name,
    )  # fmt: skip
    path = job.write(args.output)
    info(f"wrote {path}")
    if args.submit:
        info(f"submitted job {submit(path)}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from ..demo import main

    main(args.rest, prog="surge demo")
    return 0


def _doctor(args: argparse.Namespace) -> int:
    import subprocess

    from ..profiler.doctor_run import DoctorRun

    # The script runs as itself (its own __main__, its own launcher for devices=N), so the request
    # crosses a process boundary as a variable; the doctor module reads it once in that process,
    # and every Trainer there profiles a short fit and prints the diagnosis at its end.
    env = {**os.environ, **DoctorRun(args.steps).variables()}
    return subprocess.call([sys.executable, args.script, *args.script_args], env=env)


def doctor_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split `surge doctor`'s arguments into its own (`--steps N`, `-h`, and the script) and the
    script's. `--steps` is the doctor's before or after the script (`surge doctor train.py --steps 30`);
    every other argument after the script is the script's, and so is everything after `--`."""
    own: list[str] = []
    i = 0
    while i < len(argv) and (argv[i].startswith("-") or argv[i] == ""):
        if argv[i] == "--":
            i += 1
            break
        own.append(argv[i])
        if argv[i] == "--steps" and i + 1 < len(argv):
            own.append(argv[i + 1])
            i += 1
        i += 1
    if i == len(argv):
        return own, []
    own.append(argv[i])  # the script
    script_args: list[str] = []
    rest = list(argv[i + 1 :])
    while rest:
        arg = rest.pop(0)
        if arg == "--":
            script_args += rest
            break
        if arg == "--steps" or arg.startswith("--steps="):
            own += [arg, *([rest.pop(0)] if arg == "--steps" and rest else [])]
        else:
            script_args.append(arg)
    return own, script_args


def _run(args: argparse.Namespace) -> int:
    from ..lightning.__main__ import main

    return main([args.script, *args.script_args])


def _plot(args: argparse.Namespace) -> int:
    from ..errors import SurgeError
    from ..profiler.plotting import plot_run

    try:
        path = plot_run(args.run_dir, args.out)
    except (SurgeError, ImportError, OSError) as err:
        sys.stderr.write(f"surge plot: error: {err}\n")  # one line, as argparse's errors
        return 1
    info(f"wrote {path}")
    return 0


def _config_command(args: argparse.Namespace) -> int:
    import importlib.util

    if importlib.util.find_spec("jsonargparse") is None:  # one line, not a traceback
        from ..errors import install_hint

        sys.stderr.write(
            f"surge {args.command}: error: this command needs jsonargparse: {install_hint('cli')}\n"
        )
        return 1
    # A config names the user's own classes (`class_path: my_model.Net`): find them in the current
    # directory, as `python -m surge fit` would (the `surge` script's own folder is on the path instead).
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    from ..stage_cli.parse_errors import command_error
    from ..stage_cli.precheck import config_mistake

    mistake = config_mistake(args.command, args.rest)  # before torch loads: answered at once
    if mistake is not None:
        sys.stderr.write(command_error("surge", args.command, mistake))
        return 2
    from ..stage_cli.config import run_cli

    return run_cli([args.command, *args.rest], prog="surge")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="surge",
        description="surge: train PyTorch models fast and right.",
        epilog="fit/validate/test/predict --config: a config file is code (each class_path in it is "
        "imported and called); run only configs you trust, or restrict them with --allow_class_paths "
        "(see `surge fit --help`).",
    )
    parser.add_argument("--version", action="version", version=f"surge {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", help="train the digits example (python -m surge.demo)", add_help=False)
    demo.add_argument("rest", nargs=argparse.REMAINDER)
    demo.set_defaults(fn=_demo)

    launch = sub.add_parser("launch", help="run a script on N processes per node (a front to torchrun)")
    launch.add_argument("--nproc-per-node", default="1", help="processes per node (int, 'gpu' or 'auto')")
    launch.add_argument("--nnodes", default="1", help="number of nodes, or MIN:MAX for elastic jobs")
    launch.add_argument(
        "--node-rank", type=int, default=0, help="this node's rank, 0 to NNODES-1 (default 0)"
    )
    launch.add_argument(
        "--master-addr", default="127.0.0.1", help="address of rank 0's node (default 127.0.0.1)"
    )
    launch.add_argument(
        "--master-port", type=int, default=29500, help="a free port on that node (default 29500)"
    )
    launch.add_argument("--rdzv-endpoint", default=None, help="host:port of the c10d rendezvous (multi-node)")
    launch.add_argument("--rdzv-id", default="surge", help="job id shared by every node's agent")
    launch.add_argument(
        "--max-restarts", type=int, default=0, help="restart the worker group this many times"
    )
    launch.add_argument("script", help="the training script each process runs")
    launch.add_argument("script_args", nargs=argparse.REMAINDER, help="the script's own arguments")
    launch.set_defaults(fn=_launch)

    slurm = sub.add_parser("slurm", help="write (and --submit) an sbatch script for a training script")
    slurm.add_argument("--nodes", type=int, default=1, help="nodes to allocate (default 1)")
    slurm.add_argument("--gpus-per-node", type=int, default=0, help="GPUs per node: one task each")
    slurm.add_argument(
        "--tasks-per-node", type=int, default=None, help="processes per node (default: GPUs, or 1)"
    )
    slurm.add_argument("--cpus-per-task", type=int, default=None, help="CPUs per process (default: SLURM's)")
    slurm.add_argument(
        "--time", default="01:00:00", help="time limit: HH:MM:SS, minutes or D-HH:MM:SS (default 01:00:00)"
    )
    slurm.add_argument("--partition", default=None, help="the partition to run in (default: the cluster's)")
    slurm.add_argument("--job-name", default=None, help="the job's name (default surge-SCRIPT)")
    slurm.add_argument("--output", default="surge.sbatch", help="where to write the batch script")
    slurm.add_argument("--submit", action="store_true", help="submit it with sbatch")
    slurm.add_argument("script", help="the training script the job runs")
    slurm.add_argument("script_args", nargs=argparse.REMAINDER, help="the script's own arguments")
    slurm.set_defaults(fn=_slurm)

    doctor = sub.add_parser(
        "doctor",
        help="run a script's fit briefly, profiled, and say what slows it down",
        epilog="--steps may also follow the script (surge doctor train.py --steps 30); every other "
        "argument after the script is the script's, and so is everything after -- "
        "(surge doctor train.py --steps 30 -- --steps 5 gives the script its own --steps 5).",
    )
    doctor.add_argument("--steps", type=int, default=100, help="optimizer steps to profile (default 100)")
    doctor.add_argument("script", help="the training script to run (as python SCRIPT ...)")
    # main() splits the arguments (doctor_argv) and parses only the doctor's own with this parser
    doctor.add_argument("script_args", nargs="*", default=[], help="the script's own arguments")
    doctor.set_defaults(fn=_doctor)

    run = sub.add_parser(
        "run", help="run an unmodified Lightning script on surge (python -m surge.lightning)"
    )
    run.add_argument("script", help="a script that imports lightning, lightning.pytorch or pytorch_lightning")
    run.add_argument("script_args", nargs=argparse.REMAINDER, help="the script's own arguments")
    run.set_defaults(fn=_run)

    plot = sub.add_parser("plot", help="draw a run's logged curves to a PNG (needs matplotlib)")
    plot.add_argument("run_dir", help="a run directory with metrics.csv, e.g. surge_logs/version_0")
    plot.add_argument("--out", default=None, help="the PNG to write (default RUN_DIR/curves.png)")
    plot.set_defaults(fn=_plot)

    for name, help_text in COMMANDS.items():  # parsed by jsonargparse in stage_cli/config.py
        cmd = sub.add_parser(name, help=help_text, add_help=False)
        cmd.add_argument("rest", nargs=argparse.REMAINDER)
        cmd.set_defaults(fn=_config_command)

    add_export_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The `surge` command; surge's own errors are shown as their message (stage_cli/error_report.py)."""
    from ..stage_cli.error_report import errors_shown_briefly

    return errors_shown_briefly(lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv and argv[0] in _OWN_PARSER:
        # These commands parse their own arguments; argparse's REMAINDER would refuse leading options.
        return parser.parse_args(argv[:1]).fn(argparse.Namespace(command=argv[0], rest=argv[1:]))
    if argv and argv[0] == "doctor":
        own, script_args = doctor_argv(argv[1:])
        args = parser.parse_args(["doctor", *own])
        args.script_args = script_args
        return args.fn(args)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    raise SystemExit(main())
