"""More scripts written against Lightning's API, run unmodified by `surge run` in a subprocess (as in
tests/test_lightning_mode.py). Each prints one JSON line last; the expected values are what
Lightning's documented semantics give, written out here (Lightning is not installed)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

import script_server

SRC = Path(__file__).resolve().parents[1] / "src"
SCRIPTS = Path(__file__).parent / "lightning_scripts"
PRELOAD = ("torch", "surge", "surge.lightning")  # imported once by the server that forks each run


def surge_run(cwd: Path, script: str, *args: str) -> dict:
    """Run a script of lightning_scripts/ through `surge run`; returns its last line, parsed."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    env.pop("PL_GLOBAL_SEED", None)
    argv = ["-m", "surge", "run", str(SCRIPTS / script), *args]
    proc = script_server.run(sys.executable, argv, cwd=cwd, env=env, preload=PRELOAD, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_gan_with_manual_optimization_and_two_optimizers(tmp_path):
    got = surge_run(tmp_path, "gan_manual_optimization.py")
    # 3 epochs of 4 batches; each batch steps both optimizers: each step counts (Lightning 2.x).
    assert (got["global_step"], got["current_epoch"]) == (24, 3)
    # The module steps StepLR(gamma=0.5) and ExponentialLR(gamma=0.9) at each epoch's last batch:
    # the lrs used in epoch e are 0.01 * 0.5**e and 0.01 * 0.9**e; nothing else steps them.
    expected = [(0.01 * 0.5**e, 0.01 * 0.9**e) for e in range(3) for _ in range(4)]
    assert [tuple(lrs) for lrs in got["lrs"]] == [pytest.approx(lrs) for lrs in expected]
    assert got["final_lrs"] == pytest.approx([0.01 * 0.5**3, 0.01 * 0.9**3])
    # toggle_optimizer(opt_g) froze the discriminator; untoggle_optimizer restored it.
    assert got["frozen_while_generating"] and got["all_trainable_after"]
    assert got["callback_metrics"] == ["d_loss", "g_loss"]


def test_an_iterable_replay_buffer_without_length(tmp_path):
    got = surge_run(tmp_path, "iterable_replay_buffer.py")
    # 200 samples a pass in batches of 16: the epoch ends when the stream does, after 13 batches
    # (the last one short); the loader is iterated anew each epoch. No length: inf batches.
    assert got["exhausted"] == {
        "global_step": 26, "current_epoch": 2, "epoch_starts": [0, 1], "passes": 2,
        "num_training_batches": "inf",
    }  # fmt: skip
    # An endless stream: limit_train_batches=5 ends each of the 3 epochs after 5 batches.
    assert got["limited"] == {
        "global_step": 15, "current_epoch": 3, "epoch_starts": [0, 1, 2], "passes": 3,
        "num_training_batches": "5",
    }  # fmt: skip
    # An endless stream with max_steps=7 (max_epochs unset): stops after 7 batches of epoch 0.
    limited = got["max_steps"]
    assert (limited["global_step"], limited["epoch_starts"], limited["passes"]) == (7, [0], 1)


def test_transformer_language_model_on_wikitext2(tmp_path):
    got = surge_run(tmp_path, "transformer_language_model.py")
    assert (got["global_step"], got["vocab_size"]) == (40, 1000)
    # The default ModelCheckpoint saved the last epoch, under Lightning's run directory.
    assert got["checkpoint"] == "lightning_logs/version_0/checkpoints/epoch=0-step=40.ckpt"
    assert got["restored_equal"] and got["restored_hparams"] == {"vocab_size": 1000}
    losses = json.loads((tmp_path / "losses.json").read_text())
    # on_train_batch_end's outputs are {"loss": ...} (Lightning wraps a returned tensor), one a step.
    assert len(losses) == 40
    # The generated text starts at about log(1000) = 6.9 nats a word and is learnable.
    assert sum(losses[:5]) / 5 > 6.5 and sum(losses[-5:]) / 5 < 5.0


def test_on_train_batch_end_gets_a_returned_loss_as_a_dict(tmp_path):
    """Lightning passes `{"loss": loss}` (detached) for a returned tensor and `{}` for None."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import surge

    class Manual(surge.Module):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            self.lin = torch.nn.Linear(2, 1)
            self.seen = []

        def training_step(self, batch, batch_idx):
            loss = self.lin(batch[0]).sum()
            return loss if batch_idx == 0 else None

        def on_train_batch_end(self, outputs, batch, batch_idx):
            self.seen.append({k: v.requires_grad for k, v in outputs.items()})

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    model = Manual()
    loader = DataLoader(TensorDataset(torch.ones(4, 2)), batch_size=2)
    surge.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, default_root_dir=tmp_path).fit(
        model, loader
    )
    assert model.seen == [{"loss": False}, {}]


def test_multiple_val_dataloaders_suffix_the_metric_names(tmp_path):
    got = surge_run(tmp_path, "multiple_val_dataloaders.py")
    # The sanity check runs 2 batches of each loader, then validation runs all of them; batch_idx
    # restarts for each loader, and dataloader_idx is passed since there are two.
    sanity = [[True, 0, 0], [True, 0, 1], [True, 1, 0], [True, 1, 1]]
    full = [[False, 0, 0], [False, 0, 1], [False, 0, 2], [False, 1, 0], [False, 1, 1]]
    assert got["fit_calls"] == sanity + full and got["validate_calls"] == full
    # Epoch values: batch-size-weighted means (2, 5, 8 -> 5; 10, 20 -> 15); add_dataloader_idx=False
    # keeps the name as logged. validate() returns one dict per dataloader with what it logged.
    assert got["callback_metrics"] == {
        "mean_a": 5.0, "mean_b": 15.0, "val_mean/dataloader_idx_0": 5.0, "val_mean/dataloader_idx_1": 15.0,
    }  # fmt: skip
    assert got["validated"] == [
        {"mean_a": 5.0, "val_mean/dataloader_idx_0": 5.0},
        {"mean_b": 15.0, "val_mean/dataloader_idx_1": 15.0},
    ]
    assert got["tested"] == [{"test_mean": 4.0}]  # one loader: no suffix


def test_one_name_unsuffixed_on_two_dataloaders_is_refused(tmp_path):
    """Lightning refuses logging one name with add_dataloader_idx=False from two dataloaders."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import surge
    from surge.errors import MisconfigurationError

    class Clash(surge.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(1, 1)

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("val_x", batch[0].mean(), add_dataloader_idx=False)

    loader = DataLoader(TensorDataset(torch.ones(2, 1)))
    with pytest.raises(
        MisconfigurationError, match=r"'val_x', add_dataloader_idx=False.*dataloaders 0 and 1"
    ):
        surge.Trainer(logger=False, default_root_dir=tmp_path).validate(Clash(), [loader, loader])


def test_configure_callbacks_replace_the_trainers(tmp_path):
    got = surge_run(tmp_path, "configure_callbacks.py")
    # val_loss 1.0, 0.8, 0.79, 0.9: with min_delta=0.05 only epoch 1 improves, so patience=2 runs
    # out at epoch 3 (the Trainer's EarlyStopping(patience=100) was replaced): 4 epochs of 2 batches.
    assert (got["global_step"], got["current_epoch"], got["stopped_epoch"], got["patience"]) == (8, 4, 3, 2)
    # As Lightning: EarlyStopping checks at the epoch's end, after History's hook saw should_stop.
    assert got["events"] == [
        ["val", 0, 1.0], ["epoch_end", 0, False], ["val", 1, 0.8], ["epoch_end", 1, False],
        ["val", 2, 0.79], ["epoch_end", 2, False], ["val", 3, 0.9], ["epoch_end", 3, False],
    ]  # fmt: skip
    # The module's ModelCheckpoint replaced the Trainer's (which would have written trainer_ckpts/);
    # without a logger it writes to <default_root_dir>/checkpoints; its best is 0.79 (no min_delta).
    assert (got["early_stopping_callbacks"], got["checkpoint_callbacks"]) == (1, 1)
    assert got["best_model_path"] == "checkpoints/best-epoch=2-val_loss=0.79.ckpt"
    assert got["best_model_score"] == 0.79 and not got["trainer_ckpts_exists"]
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["best-epoch=2-val_loss=0.79.ckpt"]
    # Lightning's order: the Trainer's remaining callbacks, ModelSummary, the module's; checkpoints last.
    assert got["callback_types"] == ["History", "ModelSummary", "EarlyStopping", "ModelCheckpoint"]


def test_lr_warmup_in_an_optimizer_step_override(tmp_path):
    import torch
    import torch.nn.functional as F

    got = surge_run(tmp_path, "lr_warmup_optimizer_step.py")
    assert got["global_step"] == 12  # 2 epochs of 24 samples in batches of 4
    # Lightning counts the step after optimizer_step returns, so at step k the hook sets the lr
    # for step k + 1 to min(1, (k + 1) / 5) * 0.1; step 0 uses configure_optimizers' lr.
    assert got["lrs"] == pytest.approx([0.1, 0.02, 0.04, 0.06, 0.08] + [0.1] * 7)
    # The same warm-up as a plain PyTorch loop gives the same weights.
    saved = torch.load(tmp_path / "warmup.pt", weights_only=True)
    layer = torch.nn.Linear(4, 1)
    layer.load_state_dict({k.removeprefix("layer."): v for k, v in saved["initial"].items()})
    opt = torch.optim.SGD(layer.parameters(), lr=0.1, momentum=0.9)
    step = 0
    for _ in range(2):
        for i in range(0, 24, 4):
            F.mse_loss(layer(saved["x"][i : i + 4]), saved["y"][i : i + 4]).backward()
            opt.step()
            if step < 5:
                for pg in opt.param_groups:
                    pg["lr"] = min(1.0, (step + 1) / 5) * 0.1
            opt.zero_grad()
            step += 1
    for name, value in layer.state_dict().items():
        torch.testing.assert_close(saved["final"][f"layer.{name}"], value)


def test_prepare_data_setup_and_teardown_run_in_lightnings_order(tmp_path):
    got = surge_run(tmp_path, "prepare_and_setup.py")
    # Lightning: prepare_data (datamodule, module), setup (datamodule, callbacks, module),
    # configure_optimizers, on_fit_start ... on_fit_end, teardown (datamodule, callbacks, module);
    # each once per trainer call, with the call's stage.
    # The stage is a TrainerFn, a str enum (== "fit"), which an f-string shows as Lightning's does.
    assert got["fit_events"] == [
        "dm.prepare_data", "model.prepare_data", "dm.setup:TrainerFn.FITTING", "callback.setup:TrainerFn.FITTING", "model.setup:TrainerFn.FITTING",
        "model.configure_optimizers", "model.on_fit_start", "model.on_fit_end",
        "dm.teardown:TrainerFn.FITTING", "callback.teardown:TrainerFn.FITTING", "model.teardown:TrainerFn.FITTING",
    ]  # fmt: skip
    assert got["test_events"] == [
        "dm.prepare_data", "model.prepare_data", "dm.setup:TrainerFn.TESTING", "callback.setup:TrainerFn.TESTING", "model.setup:TrainerFn.TESTING",
        "dm.teardown:TrainerFn.TESTING", "callback.teardown:TrainerFn.TESTING", "model.teardown:TrainerFn.TESTING",
    ]  # fmt: skip
    assert (tmp_path / "data" / "data.pt").is_file()
    # Training used what setup built: the 40-sample split (4 batches an epoch, 3 epochs) and the
    # layer sized from the data, which the optimizer holds and the test evaluates trained.
    assert got["global_step"] == 12 and got["num_features"] == 3
    assert got["net_in_optimizer"] and got["same_net_in_test"]
    assert got["test_acc"] >= 0.8  # a linearly separable rule; chance is 0.5


def test_a_curriculum_datamodule_reloaded_every_two_epochs(tmp_path):
    got = surge_run(tmp_path, "curriculum_reload.py")
    # Lightning requests the loaders at epochs 0 and 2 (the first val request is the sanity check's);
    # epochs 0-1 train on 20 samples (2 batches), epochs 2-3 on the 40 of epoch 2's loader (4).
    assert (got["train_requests"], got["val_requests"]) == ([0, 2], [0, 2])
    assert got["batches_per_epoch"] == [2, 2, 4, 4] and got["seen"] == [20, 20, 40, 40]
    assert got["global_step"] == 12


def test_a_requeued_slurm_job_goes_on_from_its_hpc_checkpoint(tmp_path):
    """As Lightning under SLURM: the requeue signal writes hpc_ckpt_<N+1>.ckpt in default_root_dir and
    requeues the job (scontrol requeue); the requeued run's fit(), given no ckpt_path, resumes from the
    newest hpc checkpoint. Outside SLURM (an interactive job), nothing is resumed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/scontrol.log\n')
    scontrol.chmod(0o755)
    slurm = {"SLURM_JOB_ID": "4242", "SLURM_NTASKS": "1", "SLURM_JOB_NAME": "train", "SLURM_PROCID": "0",
             "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NODELIST": "localhost"}  # fmt: skip

    def run(*args: str, **extra: str) -> dict:
        env = {**os.environ, **slurm, **extra, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
        env.update(PYTHONPATH=str(SRC), OMP_NUM_THREADS="1")
        argv = ["-m", "surge", "run", str(SCRIPTS / "slurm_requeue.py"), *args]
        proc = script_server.run(sys.executable, argv, cwd=tmp_path, env=env, preload=PRELOAD, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])

    first = run("first")
    assert first["hpc"] == ["hpc_ckpt_1.ckpt"] and first["global_step"] < 16
    assert (tmp_path / "scontrol.log").read_text().split() == ["requeue", "4242"]
    again = run()
    assert again["started_at"] == first["global_step"] > 0 and again["global_step"] == 16
    interactive = run(SLURM_JOB_NAME="interactive")
    assert interactive["started_at"] == 0  # not SLURM's process: a new run, as Lightning


TINY_FIT = """
import torch
import lightning.pytorch as pl
from torch.utils.data import DataLoader, TensorDataset

class Regression(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

data = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=8)
pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
           enable_model_summary=False).fit(Regression(), data)
"""


def test_the_goodput_report_is_silent_under_surge_run_unless_asked(tmp_path):
    script = tmp_path / "tiny.py"
    script.write_text(TINY_FIT)
    said = {}
    for asked in (None, "line", "table"):
        env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
        env.pop("SURGE_GOODPUT", None)
        env.update({"SURGE_GOODPUT": asked} if asked else {})
        proc = script_server.run(sys.executable, ["-m", "surge", "run", str(script)], cwd=tmp_path, env=env,
                                 preload=PRELOAD, timeout=120)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        said[asked] = proc.stdout + proc.stderr
    assert "Goodput" not in said[None]
    assert said["line"].count("Goodput: ") == 1 and "wall (1 run)" not in said["line"]
    assert "wall (1 run)" in said["table"]
