"""What hooks see around the optimizer step matches real Lightning (tests/oracle/scripts/step_points.py):
the loss and gradients in `on_train_batch_end` (divided by the window, still held after the step),
the closure's return, a scheduler's `frequency` counted by batch, `on_train_batch_start` returning
-1, `should_stop` inside a window, a training step's own backward, `LearningRateMonitor`'s metrics;
and where surge's own API keeps its own rules (the raw loss, gradients freed, steps counted)."""

from __future__ import annotations

import pytest
import torch
from oracle_runs import assert_same_weights, run_both

RUNS = ("plain", "accumulate", "closure", "frequency", "cut", "stop", "own_backward", "lr_monitor")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return run_both("step_points.py", tmp_path_factory.mktemp("step_points"))


@pytest.mark.parametrize("run", RUNS)
def test_what_hooks_see_around_the_step_matches_lightning(runs, run):
    lightning, surge = runs
    for key in ("events", "global_step", "lr", "logged", "callback"):
        assert surge.record.get(f"{run}/{key}") == lightning.record.get(f"{run}/{key}"), key
    assert_same_weights(lightning.weights(run), surge.weights(run))


def test_the_points_are_the_ones_meant(runs):
    """Lightning's behaviour the comparison relies on, so a changed script cannot pass vacuously."""
    record = runs[0].record
    plain, accumulate = record["plain/events"], record["accumulate/events"]
    assert plain[0][2] == pytest.approx(2 * accumulate[0][2])  # the loss comes divided by the window
    assert all(event[5] is not None for event in plain)  # gradients still held after the step
    assert [e[1] for e in record["closure/events"] if e[0] == "step returned"][0] == pytest.approx(
        accumulate[1][2]
    )
    assert (record["frequency/lr"], record["accumulate/lr"]) == (record["accumulate/lr"], 0.1 * 0.5**8)
    assert (record["cut/global_step"], record["cut/lr"]) == (2, 0.1 * 0.5**4)  # -1 stepped the scheduler
    assert record["stop/global_step"] == 1  # stopped inside the second window, which never stepped
    assert "lr-SGD" in record["lr_monitor/callback"] and "lr-SGD" not in record["lr_monitor/logged"]


def test_own_api_reports_the_raw_loss_and_frees_gradients_and_counts_steps():
    """Without the mode: on_train_batch_end gets the loss as returned (not divided), the gradients
    are freed at the step (less memory in the next forward), and `frequency` counts optimizer steps."""
    from helpers import TinyModel, fast_trainer, make_loaders

    seen = []

    class Watch(TinyModel):
        def training_step(self, batch, batch_idx):
            out = super().training_step(batch, batch_idx)
            seen.append(["loss", out.item()])
            return out

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
            return [opt], [{"scheduler": sched, "interval": "step", "frequency": 2}]

        def on_train_batch_end(self, outputs, batch, batch_idx):
            seen.append(["end", outputs["loss"].item(), self.net[0].weight.grad is None])

    train, val = make_loaders(n_train=64, batch_size=8)  # 8 batches: 4 windows of 2
    trainer = fast_trainer(max_epochs=1, accumulate_grad_batches=2, num_sanity_val_steps=0)
    model = Watch()
    trainer.fit(model, train, val)
    losses = [s[1] for s in seen if s[0] == "loss"]
    ends = [s for s in seen if s[0] == "end"]
    assert [e[1] for e in ends] == pytest.approx(losses)
    assert [e[2] for e in ends] == [False, True] * 4  # freed after each window's step
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.1 * 0.5**2)  # 4 steps, every 2nd


def test_standard_output_is_what_lightning_prints(runs):
    """surge's messages (the seed, the goodput table) go to standard error, as Lightning's do: a
    script's standard output is what it prints itself (here nothing, under both)."""
    lightning, surge = runs
    assert surge.stdout == lightning.stdout == ""
    assert "Seed set to 1" in surge.output


def test_a_resume_from_an_epochs_last_batch_runs_what_followed_the_save(tmp_path):
    """A deliberate difference (docs/lightning.md): surge resumes with the epoch's validation and end
    and the next epoch's start, which the first run ran after its save; Lightning skips all three."""
    lightning, surge = run_both("resume_last_batch.py", tmp_path)
    first = [f"batch 0/{i}" for i in range(4)] + ["validation_end 0", "epoch_end 0 step=4"]
    second = [f"batch 1/{i}" for i in range(4)] + ["validation_end 1", "epoch_end 1 step=8"]
    assert lightning.record["events"] == ["epoch_start 0", *first, "resumed", *second]
    assert surge.record["events"] == [
        "epoch_start 0", *first, "resumed", "validation_end 0", "epoch_end 0 step=4", "epoch_start 1", *second
    ]  # fmt: skip
    assert surge.record["end"] == lightning.record["end"] == [2, 8]


STOPS = ("cut_plateau", "val_plateau", "stop_in_window", "early_stopping", "stop_between", "epoch_starts",
         "min_steps", "stop_plateau")  # fmt: skip


@pytest.mark.parametrize("run", STOPS)
def test_stops_cuts_and_plateaus_match_lightning(tmp_path, run):
    """tests/oracle/scripts/stop_points.py: validations run, zero_grad hooks, gradients held, the end's
    global_step and learning rate, and the weights."""
    lightning, surge = run_both("stop_points.py", tmp_path, run)
    assert surge.record == lightning.record
    assert_same_weights(lightning.weights(run), surge.weights(run))
    meant = {  # Lightning's, so a changed script cannot pass vacuously
        "cut_plateau": lambda r: r["end"] == [2, 0.025],  # no plateau step at the cut
        "stop_in_window": lambda r: "on_validation_model_zero_grad" not in r["events"],
        "early_stopping": lambda r: sum(e.startswith("validation") for e in r["events"]) == 2,
        "stop_between": lambda r: (
            r["events"][-2:] == ["validation 2 at step 5", "train end, grad held False"]
        ),
        "epoch_starts": lambda r: r["events"][1] == "epoch 1 starts, grad held True",
        "min_steps": lambda r: r["end"][0] == 6,  # min_steps alone implies min_epochs=1
        "stop_plateau": lambda r: r["end"][1] == 0.1,
    }
    if run in meant:
        assert meant[run]({k.split("/", 1)[1]: v for k, v in lightning.record.items()}), lightning.record


def test_a_scripts_rank_zero_messages_go_where_lightnings_go(tmp_path):
    lightning, surge = run_both("messages.py", tmp_path)
    for run in (lightning, surge):
        assert run.stdout == "printed\n"
        assert "an info message" in run.output and "a debug message" not in run.output


def test_clipping_arguments_match_lightning(tmp_path):
    """`gradient_clip_algorithm` not given reaches `configure_gradient_clipping` and the trainer's
    attribute as None (surge clips by norm then, as Lightning does)."""
    lightning, surge = run_both("clip_arguments.py", tmp_path)
    assert lightning.record["hook"] == [[None, None], [0.5, None], [0.5, "value"]]
    assert surge.record == lightning.record
    for n in range(3):
        assert_same_weights(lightning.weights(f"clip{n}"), surge.weights(f"clip{n}"))


def test_device_stats_rows_are_where_lightnings_are(tmp_path):
    lightning, surge = run_both("device_stats_rows.py", tmp_path)
    assert lightning.record["rows1"][:2] == [["1", ["DeviceStatsMonitor.on_train_batch_start"]],
                                             ["1", ["DeviceStatsMonitor.on_train_batch_end"]]]  # fmt: skip
    assert surge.record == lightning.record
