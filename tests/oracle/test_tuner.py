"""`Tuner.scale_batch_size` and `Tuner.lr_find` against real Lightning: the batch size each search
settles on (doubling, bisection, `max_trials`, `max_val`, the dataset's length, the margin), where the
tuned value is set, what the trainer holds afterwards (its train loader, its callbacks, no steps
taken), the weights restored, and the errors a misconfigured call raises; `method="validate"`,
`"test"` and `"predict"` search with that stage's steps. `lr_find`'s `results` (the rates and the
smoothed losses, float for float), its suggestion and the figure `plot()` returns (its type and the
data of its lines, not its pixels) are Lightning's."""

from oracle_runs import run_both


def test_scale_batch_size_matches_lightning(tmp_path):
    lightning, surge = run_both("tuner_batch_size.py", tmp_path)
    assert lightning.record["binsearch_two_trials.found"] == 7  # int(8 * 0.95): the margin after 2 trials
    assert lightning.record["power.found"] == 64  # doubling stops once a size reaches the 48 samples
    assert lightning.record["validate.found"] == 16  # method="validate": 4 trials of validation steps
    assert lightning.record["validate.train_loader_batch_size"] is None  # no fit ran
    assert (
        lightning.record["binsearch_two_trials.val_loader_batch_size"] == 7
    )  # re-created with the size found
    assert surge.record == lightning.record


def test_lr_find_matches_lightning(tmp_path):
    lightning, surge = run_both("tuner_lr_find.py", tmp_path)
    assert lightning.record["attribute_and_hparams_set"] and lightning.record["one_step"] == [None, 0.123]
    assert lightning.record["rng_restored"] and lightning.record["bounded_by_the_fit"] == 10
    assert lightning.record["bounded_batch_indices"] == [0, 1, 2, 3, 4] * 2  # the epoch's batch index
    for key in ("results", "linear_results", "bounded_results", "falling_results"):
        assert surge.record[key] == lightning.record[key], key
    assert len(lightning.record["linear_results"]["lr"]) < 40  # stopped early: the loss diverged
    assert lightning.record["plot_suggest"]["type"] == "matplotlib.figure.Figure"
    drawn = lightning.record["plot_suggest"]["axes"][0]
    assert drawn["xscale"] == "log" and [line[2] for line in drawn["lines"]] == ["None", "o"]  # curve, point
    assert drawn["lines"][1][0] == [lightning.record["suggestion"]] and lightning.record["plot_on_axes"]
    for key in (
        "suggestion",
        "suggestion_skipping",
        "linear_suggestion",
        "plot",
        "plot_suggest",
        "linear_plot",
    ):
        assert surge.record[key] == lightning.record[key], key
    assert surge.record == lightning.record
