"""A PPO-style loop against real Lightning (scripts/rl_episode_stats.py): episode statistics a
streaming IterableDataset updates once an epoch's samples are out, logged as floats per epoch
without a batch size. metrics.csv row for row, `callback_metrics`, what each step saw, the weights."""

import csv

import pytest
from oracle_runs import assert_same_weights, run_both


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return run_both("rl_episode_stats.py", tmp_path_factory.mktemp("rl_episode_stats"))


def rows(run):
    with open(run.cwd / "logs" / "version_0" / "metrics.csv", newline="") as f:
        return list(csv.reader(f))


def test_the_episode_statistics_are_lightnings(runs):
    lightning, surge = runs
    assert rows(surge) == rows(lightning)
    assert surge.record == lightning.record


def test_the_weights_are_lightnings(runs):
    lightning, surge = runs
    assert_same_weights(lightning.weights("final"), surge.weights("final"))
