"""A fit leaves in the folders Lightning owns exactly Lightning's files, under `surge run` as under
Lightning 2.6.6 (tests/oracle/scripts/run_folders.py): the checkpoint and log folders at the end and
while training (no lock, no heartbeat, no metrics.csv beside TensorBoard's files, nothing in the
working directory), for the default logger, CSVLogger, TensorBoardLogger, no logger, a dirpath of the
user's, saves every n steps, a resume, a run that logs nothing (an empty hparams.yaml and an event
file); and what the Trainer says of them: `log_dir`/`default_root_dir` and a logger's folders as
str, `fast_dev_run`'s checkpoint callback, `save_hyperparameters` called twice, a class-valued
hyper-parameter loaded with `weights_only=False`, `log_graph`."""

from __future__ import annotations

import pytest
from oracle_runs import run_both

RUNS = (
    "default",
    "csv",
    "tensorboard",
    "none",
    "dirpath",
    "steps",
    "resume",
    "silent",
    "twice",
    "classes",
    "graph",
    "late",
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return run_both("run_folders.py", tmp_path_factory.mktemp("run_folders"))


@pytest.mark.parametrize("run", RUNS)
def test_the_folders_hold_exactly_lightnings_files(runs, run):
    lightning, surge = runs
    for key in ("files", "during", "cwd"):
        assert surge.record[f"{run}/{key}"] == lightning.record[f"{run}/{key}"], key
    assert surge.files() == lightning.files() or _same_but_events(surge.files(), lightning.files())


def _same_but_events(a: list[str], b: list[str]) -> bool:
    """TensorBoard's event files are named after the time, host and pid."""

    def named(files: list[str]) -> list[str]:
        return sorted(
            "/".join("EVENTS" if s.startswith("events.out.") else s for s in f.split("/")) for f in files
        )

    return named(a) == named(b)


@pytest.mark.parametrize("key", ["types", "joined"])
@pytest.mark.parametrize("run", ["default", "csv", "tensorboard", "none"])
def test_the_folders_are_named_as_lightning_names_them(runs, run, key):
    lightning, surge = runs
    assert surge.record[f"{run}/{key}"] == lightning.record[f"{run}/{key}"]


@pytest.mark.parametrize(
    "key",
    [
        "fast/callback", "fast/files", "silent/hparams.yaml", "twice/hparams", "twice/yaml", "twice/ckpt",
        "twice/loaded", "classes/default", "classes/trusted", "graph/flag", "graph/in_events", "late/in_events",
    ],
)  # fmt: skip
def test_what_the_trainer_and_the_module_say_matches_lightning(runs, key):
    lightning, surge = runs
    assert surge.record[key] == lightning.record[key]


def test_the_scenarios_are_the_ones_meant(runs):
    """Lightning's behaviour the comparison relies on, so a changed script cannot pass vacuously."""
    record = runs[0].record
    assert record["default/types"]["trainer.log_dir"] == ["str", "default/lightning_logs/version_0"]
    assert (
        record["fast/callback"] == ["ModelCheckpoint", ""] and record["fast/files"] is None
    )  # no folder made
    assert record["twice/ckpt"] == {"depth": 5, "lr": 0.01, "width": 16}
    assert record["classes/default"] == "refused" and record["classes/trusted"] == [True, "Tanh"]
    assert (
        record["silent/hparams.yaml"] == "{}\n"
        and "lightning_logs/version_0/EVENTS" in record["silent/files"]
    )
    assert record["graph/in_events"] and record["late/in_events"]


def test_a_resume_in_the_mode_reads_the_first_runs_heartbeat(runs):
    """The heartbeat lives outside Lightning's folders and the resumed run still finds it: the job's
    second run, with no 'no heartbeat' note."""
    assert runs[1].record["surge/resume_goodput"] == [2, []]
