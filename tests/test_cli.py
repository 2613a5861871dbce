"""The `surge` command: subcommands listed, sbatch scripts written as SLURM expects."""

from __future__ import annotations

import pytest

from surge.cli import build_parser, main
from surge.launch.environment import ClusterEnvironment, detect, first_host
from surge.launch.sbatch import SbatchJob


def test_help_lists_the_subcommands(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("demo", "launch", "slurm"):
        assert command in out


def test_slurm_writes_a_preemption_ready_script(tmp_path):
    path = tmp_path / "job.sbatch"
    main(["slurm", "--nodes", "2", "--gpus-per-node", "8", "--time", "02:00:00", "--partition", "gpu",
          "--output", str(path), "train.py", "--lr", "0.1"])  # fmt: skip
    text = path.read_text()
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=8", "#SBATCH --gpus-per-node=8",
                 "#SBATCH --time=02:00:00", "#SBATCH --partition=gpu", "#SBATCH --signal=USR1@90",
                 "#SBATCH --requeue"):  # fmt: skip
        assert line in text.splitlines()
    assert text.rstrip().splitlines()[-1].endswith("train.py --lr 0.1")
    assert text.rstrip().splitlines()[-1].startswith("srun ")


@pytest.mark.parametrize("time", ["2h", "01:xx:00", ""])
def test_slurm_rejects_a_bad_time(time):
    with pytest.raises(ValueError, match="--time"):
        SbatchJob(script="train.py", time=time)


def test_launch_parses_like_torchrun():
    args = build_parser().parse_args(["launch", "--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "1",
                                      "--master-addr", "10.1.2.3", "train.py", "--epochs", "3"])  # fmt: skip
    assert (args.nproc_per_node, args.nnodes, args.node_rank, args.master_addr) == ("2", "2", 1, "10.1.2.3")
    assert args.script == "train.py" and args.script_args == ["--epochs", "3"]


def test_environments_are_detected():
    torchrun = detect({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                       "MASTER_ADDR": "h0", "MASTER_PORT": "1234", "GROUP_RANK": "1"})  # fmt: skip
    assert torchrun == ClusterEnvironment(source="torchrun", world_size=4, global_rank=3, local_rank=1, node_rank=1,
                                          local_world_size=2, master_addr="h0", master_port=1234)  # fmt: skip
    slurm = detect({"SLURM_NTASKS": "4", "SLURM_PROCID": "2", "SLURM_LOCALID": "0", "SLURM_NODEID": "1",
                    "SLURM_NNODES": "2", "SLURM_NODELIST": "gpu[003-004]", "SLURM_JOB_ID": "77",
                    "SLURM_JOB_NAME": "train", "SLURM_STEP_ID": "0"})  # fmt: skip
    assert (slurm.source, slurm.world_size, slurm.global_rank, slurm.node_rank) == ("slurm", 4, 2, 1)
    assert slurm.master_addr == "gpu003" and slurm.local_world_size == 2 and slurm.num_nodes == 2
    assert detect({}).source == "local"
    batch_shell = {"SLURM_NTASKS": "2", "SLURM_PROCID": "0", "SLURM_JOB_ID": "5", "SLURM_JOB_NAME": "train"}
    assert detect(batch_shell).source == "local"  # no srun step: no peers will join
    assert first_host("node1,node2") == "node1" and first_host("a[10-12,15]") == "a10"


def test_an_environment_round_trips_through_the_variables_a_started_rank_gets():
    surge_rank = ClusterEnvironment(source="surge", world_size=3, global_rank=2, local_rank=2, local_world_size=3,
                                    master_port=4321)  # fmt: skip
    assert detect(surge_rank.variables()) == surge_rank
    assert surge_rank.init_method() == "tcp://127.0.0.1:4321"  # given explicitly, not read from os.environ
    torchrun = ClusterEnvironment(source="torchrun", world_size=2, local_world_size=2, master_addr="h0")
    assert detect(torchrun.variables()) == torchrun
    assert torchrun.init_method() == "env://"  # torchrun's agent may share its store through the variables
    slurm = ClusterEnvironment(source="slurm", world_size=2, master_addr="fe80::1", master_port=15077)
    assert slurm.init_method() == "tcp://[fe80::1]:15077"


def test_the_strategy_takes_its_ranks_from_the_environment_it_is_given(monkeypatch):
    from surge.accelerators import resolve_accelerator
    from surge.arguments import TrainerConfig
    from surge.assembly import build_strategy

    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "SLURM_STEP_ID"):
        monkeypatch.delenv(var, raising=False)  # this process itself runs alone
    env = ClusterEnvironment(source="torchrun", world_size=4, global_rank=3, local_rank=1, node_rank=1,
                             local_world_size=2, master_addr="h0")  # fmt: skip
    cpu = resolve_accelerator("cpu")
    strategy = build_strategy(
        "ddp", TrainerConfig(accelerator="cpu", devices=2, num_nodes=2), cpu, [0, 1], env
    )
    assert (strategy.global_rank, strategy.local_rank, strategy.world_size) == (3, 1, 4)
    assert strategy.env is env and strategy.launcher is None  # torchrun started the ranks
