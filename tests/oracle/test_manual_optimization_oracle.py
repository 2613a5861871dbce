"""Manual optimization against real Lightning: the same GAN, RL-style and boring scripts under both,
compared for every optimization hook call (with its arguments, callbacks' and module's), the
logged metrics (metrics.csv), `callback_metrics` and the final weights (`torch.equal`)."""

import json

import pytest
from oracle_runs import Run, assert_same_weights, run_both

pytestmark = pytest.mark.slow


def assert_same_logged_metrics(lightning: Run, surge: Run) -> None:
    """metrics.csv byte for byte: one row per logging call at Lightning's step, which counts
    batches (not the two optimizer steps each batch makes) stepped before the one logging."""
    theirs, ours = ((r.cwd / "logs" / "version_0" / "metrics.csv").read_text() for r in (lightning, surge))
    assert theirs.count("\n") > 3
    assert ours == theirs


def test_gan_hooks_metrics_and_weights_match_lightning(tmp_path):
    lightning, surge = run_both("manual_gan.py", tmp_path)
    record = lightning.record
    assert record["global_step"] == 48  # 3 epochs x 8 batches x 2 optimizer steps
    # Each optimizer step: on_before_backward, on_after_backward, on_before_optimizer_step, for the
    # callbacks and then the module; on_before_zero_grad never (the module zeroes its own gradients).
    assert record["hook_counts"] == {
        "callback.on_after_backward": 48, "callback.on_before_backward": 48,
        "callback.on_before_optimizer_step": 48, "callback.on_train_batch_end": 24,
        "callback.on_train_batch_start": 24, "module.on_after_backward": 48,
        "module.on_before_backward": 48, "module.on_before_optimizer_step": 48,
    }  # fmt: skip
    assert record["optimizers"] == ["LightningAdam", "LightningAdam"]
    assert record["raw_optimizers"] == ["Adam", "Adam"]
    assert record["nonfinite"] == [48, 0]
    assert surge.record == record
    assert_same_weights(lightning.weights("final"), surge.weights("final"))
    assert_same_logged_metrics(lightning, surge)


def test_gan_on_two_ddp_processes_matches_lightning(tmp_path):
    lightning, surge = run_both("manual_gan.py", tmp_path, "ddp", timeout=600)
    for rank in (0, 1):
        theirs = json.loads((lightning.cwd / f"record-rank{rank}.json").read_text())
        ours = json.loads((surge.cwd / f"record-rank{rank}.json").read_text())
        assert theirs["global_step"] == 48 and theirs["hook_counts"]["module.on_before_optimizer_step"] == 48
        assert ours == theirs, f"rank {rank}"
    assert_same_weights(lightning.weights("final"), surge.weights("final"))


def test_rl_style_loop_with_closures_and_boring_model_match_lightning(tmp_path):
    lightning, surge = run_both("manual_rl.py", tmp_path)
    record = lightning.record
    assert record["global_step"] == 12 and record["boring_global_step"] == 8
    assert record["boring_optimizer"] == "LightningSGD"
    assert len(record["returned"]) == 8  # step(closure=...) returns the closure's loss
    assert surge.record == record
    for name in ("actor_critic", "boring"):
        assert_same_weights(lightning.weights(name), surge.weights(name))
