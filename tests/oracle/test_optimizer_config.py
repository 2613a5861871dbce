"""What fit says of `configure_optimizers()` against real Lightning, by kind of optimization:
manual optimization takes any scheduler and warns of the keys it ignores; automatic optimization
refuses a scheduler that is not torch's, two optimizers, and a `training_step(..., optimizer_idx)`;
a manual `opt.step(closure=..., extra=...)` reaches the optimizer's `step` as it was called."""

from oracle_runs import run_both


def test_optimizer_configuration_matches_lightning(tmp_path):
    lightning, surge = run_both("optimizer_config.py", tmp_path)
    assert sorted(surge.record) == sorted(lightning.record)
    assert surge.record["step_calls"] == lightning.record["step_calls"] == [[0, ["closure", "extra"]]] * 6
    for case in ("manual_plateau_dict", "manual_plateau", "manual_not_torch"):
        assert surge.record[case] == lightning.record[case], case
    assert lightning.record["manual_plateau_dict"][0] == ["ok", ["step"]]
    assert lightning.record["manual_plateau_dict"][1][0][0] == "RuntimeWarning"
    for case in ("automatic_two", "optimizer_idx"):
        assert surge.record[case] == lightning.record[case], case
        assert lightning.record[case][0][0] == ["RuntimeError"]
    (caught_by, message), _ = lightning.record["automatic_not_torch"]
    (ours, our_message), _ = surge.record["automatic_not_torch"]
    assert set(caught_by) <= set(ours)
    assert (
        "doesn't follow PyTorch's LRScheduler" in message
        and "doesn't follow PyTorch's LRScheduler" in our_message
    )
