"""A training_step that returns None (automatic optimization) under both frameworks: the batch adds no
gradient, its window still ends in an optimizer step, global_step and a step-interval scheduler
advance, on_train_batch_end gets {}; the weights come out torch.equal."""

from __future__ import annotations

from oracle_runs import assert_same_weights, run_both


def test_a_step_returning_none_matches_lightning(tmp_path):
    lightning, surge = run_both("none_step.py", tmp_path)
    for run in ("plain", "accumulate", "own_backward"):
        assert surge.record[f"{run}/events"] == lightning.record[f"{run}/events"], run
        assert surge.record[f"{run}/global_step"] == lightning.record[f"{run}/global_step"], run
        assert_same_weights(lightning.weights(run), surge.weights(run))
    # every batch steps without accumulation (8), every window of two with it (4)
    assert (lightning.record["plain/global_step"], lightning.record["accumulate/global_step"]) == (8, 4)
    # batch 1 (a skipped one) has no backward, and still its optimizer step
    assert lightning.record["plain/events"][5:8] == [
        "before_zero_grad", "before_optimizer_step global_step=1",
        "batch_end 1 outputs=[] global_step=2 lr=0.025",
    ]  # fmt: skip
    assert lightning.record["plain/warned"] and surge.record["plain/warned"]
    assert (
        lightning.record["accumulate/warned"] is surge.record["accumulate/warned"] is False
    )  # once a process


def test_a_backward_of_its_own_before_none_is_dropped_without_zero_grad_hooks():
    """Lightning zeroes at each window's first batch after training_step; surge frees gradients after
    the step instead when no zero_grad hook is overridden, and must still drop these."""
    import torch

    from helpers import TinyModel, fast_trainer, make_loaders

    class OwnBackward(TinyModel):
        def training_step(self, batch, batch_idx):
            super().training_step(batch, batch_idx).backward()
            return None

    model = OwnBackward()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = fast_trainer(max_epochs=1, num_sanity_val_steps=0)
    trainer.fit(model, *make_loaders())
    assert trainer.global_step > 0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
