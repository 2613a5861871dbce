"""The Lightning mode's differences are one value (`surge.config.semantics.Semantics`): its fields
and docs/lightning.md's table agree, the mode is read in one place, the training step branches on
it in at most two lines, and each field does what it says in both modes."""

from __future__ import annotations

import ast
import dataclasses
import re
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import surge
from surge.config.semantics import LIGHTNING, SURGE, Semantics

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "surge"
DOC = ROOT / "docs" / "lightning.md"


def _table() -> dict[str, tuple[str, str]]:
    """docs/lightning.md's "Where the Lightning mode differs": field -> (surge's cell, the mode's)."""
    section = DOC.read_text().split("## Where the Lightning mode differs", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = (cells[1], cells[2])
    return rows


def _value(cell: str) -> object:
    return ast.literal_eval(re.match(r"`([^`]*)`", cell).group(1))  # type: ignore[union-attr]


def test_the_docs_table_lists_every_field_with_both_values():
    fields = [f.name for f in dataclasses.fields(Semantics) if f.name != "name"]
    rows = _table()
    assert list(rows) == fields
    for field, (ours, theirs) in rows.items():
        assert _value(ours) == getattr(SURGE, field), field
        assert _value(theirs) == getattr(LIGHTNING, field), field
    assert all(getattr(SURGE, f) != getattr(LIGHTNING, f) for f in fields)  # a field is a difference


def test_the_mode_is_read_in_one_place():
    """The finder's mark is read by `Semantics.current()` alone; that is called by the Trainer's
    constructor, and by two objects a script builds before any Trainer: a logger (its default run
    name) and ModelCheckpoint (Lightning's refusal of top-k without a monitor, at construction)."""
    readers, callers = [], []
    for path in sorted(SRC.rglob("*.py")):
        text, name = path.read_text(), str(path.relative_to(SRC))
        assert "semantics.lightning()" not in text, name
        if 'getattr(finder, "lightning_semantics"' in text:
            readers.append(name)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("Semantics.current"):
                callers.append(name)
    assert readers == ["config/semantics.py"]
    # (a logger and a ModelCheckpoint are built before any Trainer, and answer then, as Lightning's)
    assert sorted(callers) == [
        "callbacks/checkpoint_options.py",
        "loggers/run_name.py",
        "trainer/__init__.py",
    ]


SEMANTIC_NAMES = ("semantics", "divided", "schedules_by_batch", "scheduler_clock", "reports_divided_loss")
STEP_FUNCTIONS = {  # the training loop (all of it) and what it calls per batch
    "loops/fit.py": None,
    "loops/train_batches.py": None,
    "optim/__init__.py": ("step", "step_schedulers", "step_schedulers_at_cut", "zero_grad_window"),
}


def test_the_training_step_branches_on_semantics_in_at_most_two_lines():
    branching = []
    for file, names in STEP_FUNCTIONS.items():
        source = (SRC / file).read_text()
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef) and (names is None or node.name in names):
                for line in lines[node.lineno - 1 : node.end_lineno]:
                    code = line.split("#", 1)[0]
                    conditional = re.search(r"\bif\b|\belse\b", code)
                    if conditional and any(re.search(rf"\b{n}\b", code) for n in SEMANTIC_NAMES):
                        branching.append(f"{file}: {code.strip()}")
    assert len(branching) <= 2, branching
    assert any("if divided else" in line for line in branching)  # (the test finds what it counts)


# -- each field, in each mode ------------------------------------------------------------------
@pytest.fixture(params=["surge", "lightning"])
def semantics(request):
    """Trainers built in this test follow SURGE, or LIGHTNING (the mode's finder installed)."""
    from surge.lightning import mode

    if request.param == "lightning":
        mode.install()
    try:
        yield SURGE if request.param == "surge" else LIGHTNING
    finally:
        if request.param == "lightning":
            mode.uninstall()


def test_the_trainer_decides_once_when_built(semantics):
    trainer = surge.Trainer(logger=False, enable_checkpointing=False)
    assert trainer.semantics is semantics
    assert trainer.strategy.reseeds_ranks is semantics.reseeds_ranks


class Recorder(surge.Module):
    """Two optimizer steps of two micro-batches; a StepLR of frequency 2 stepping per step."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(2, 1)
        self.batch_ends: list[tuple[float, bool]] = []  # (loss seen / returned, gradients still there)

    def training_step(self, batch, batch_idx):
        self.returned = loss = self.layer(batch[0]).pow(2).mean() + 1.0
        self.log("loss", loss)
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx):
        seen = float(outputs["loss"] / self.returned.detach())
        self.batch_ends.append((seen, self.layer.weight.grad is not None))

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=1.0)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step", "frequency": 2}}


def _fit(tmp_path: Path, **args) -> tuple[Recorder, surge.Trainer]:
    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2)
    model = Recorder()
    logger = surge.loggers.CSVLogger(tmp_path)
    trainer = surge.Trainer(
        max_epochs=1, accumulate_grad_batches=2, logger=logger, log_every_n_steps=1,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, **args,
    )  # fmt: skip
    trainer.fit(model, data)
    return model, trainer


def test_step_fields_scheduler_clock_batch_end_loss_frees_gradients(semantics, tmp_path):
    model, trainer = _fit(tmp_path)
    lr = trainer.optimizers[0].param_groups[0]["lr"]
    # two optimizer steps: surge counts them (frequency 2: one scheduler step); Lightning counts
    # batches 2 and 4 (two scheduler steps)
    assert lr == {"optimizer_steps": 0.5, "batch_index": 0.25}[semantics.scheduler_clock]
    seen = [round(ratio, 6) for ratio, _ in model.batch_ends]  # (the loss seen / as returned)
    assert seen == [{"as_returned": 1.0, "divided": 0.5}[semantics.batch_end_loss]] * 4
    window_ends = [kept for i, (_, kept) in enumerate(model.batch_ends) if i % 2 == 1]
    assert window_ends == [semantics.frees_gradients == "next_window"] * 2


def test_logger_step_offset_and_default_name(semantics, tmp_path):
    _, trainer = _fit(tmp_path)
    run = Path(trainer.log_dir)
    assert run.parent.name == semantics.default_logger_name
    rows = (run / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    steps = [
        int(row.split(",")[header.index("step")]) for row in rows[1:] if row.split(",")[header.index("loss")]
    ]
    assert steps[0] == 1 - semantics.logger_step_offset  # the first optimizer step's row


def test_epoch_reduction_is_the_results_field(semantics, tmp_path):
    _, trainer = _fit(tmp_path, limit_val_batches=0)
    assert trainer._train_results._own_unsynced is not semantics.epoch_reduces_unsynced
    assert trainer._train_results._uncalled_left_out is (semantics.uncalled_metric_step == "left_out")
    assert trainer._parts.semantics is semantics  # validation and evaluation read it there


class Drawing(Recorder):
    """Draws from the global stream in training and in validation."""

    def __init__(self) -> None:
        super().__init__()
        self.draws: list[float] = []

    def training_step(self, batch, batch_idx):
        self.draws.append(float(torch.rand(())))
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch, batch_idx):
        torch.rand(())


def test_validation_moves_training_rng(semantics, tmp_path):
    draws = []
    for val_batches in (0, 2):
        torch.manual_seed(0)
        model, data = Drawing(), DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2)
        trainer = surge.Trainer(
            max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=val_batches,
        )  # fmt: skip
        trainer.fit(model, data, data)
        draws.append(model.draws)
    assert (draws[0] != draws[1]) is semantics.validation_moves_training_rng


def test_default_loggers_and_goodput(semantics, tmp_path):
    from surge.loggers.default import default_loggers, tensorboard_available
    from surge.profiler.goodput_watch import GoodputLedger, GoodputWatch

    if tensorboard_available():
        names = [type(lg).__name__ for lg in default_loggers(tmp_path, semantics)]
        assert ("CSVLogger" in names) is semantics.csv_beside_tensorboard
    watch = GoodputWatch(GoodputLedger(), None, semantics)
    assert watch.in_loggers is semantics.goodput_in_loggers
    assert watch.report == ("line" if semantics.goodput_report == "line" else "off")


def test_fp16_on_cpu_warning(semantics):
    from surge.precision import KEEP_FP16, precision_plugin

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        precision_plugin("16-mixed", "cpu", semantics)
    said = " ".join(str(w.message) for w in caught)
    assert "Using `precision='bf16-mixed'` instead." in said
    assert (KEEP_FP16 in said) is semantics.fp16_on_cpu_advice


class TwoOptimizers(Recorder):
    def configure_optimizers(self):
        return [torch.optim.SGD([self.layer.weight], lr=0.1), torch.optim.SGD([self.layer.bias], lr=0.1)]


def test_several_optimizers_in_automatic_optimization(semantics):
    from surge.optim import configured_optimizers

    if semantics.automatic_multiple_optimizers == "refused":
        with pytest.raises(RuntimeError, match="only supported with manual optimization"):
            configured_optimizers(TwoOptimizers(), semantics)
    else:
        assert len(configured_optimizers(TwoOptimizers(), semantics)[0]) == 2


def test_requeue_checkpoint_and_top_k_without_monitor(semantics):
    from surge.config.lightning import requeue_of
    from surge.config.plugins import Plugins

    assert requeue_of(Plugins(), semantics).hpc is (semantics.requeue_checkpoint == "hpc_ckpt")
    if semantics.top_k_without_monitor == "refused":
        with pytest.raises(surge.MisconfigurationError, match="not a valid configuration"):
            surge.callbacks.ModelCheckpoint(save_top_k=2)  # no monitor
    else:
        assert surge.callbacks.ModelCheckpoint(save_top_k=2).save_top_k == 2


def test_checkpoint_lock_fit_end_words_and_cpu_threads(semantics, tmp_path, monkeypatch):
    import surge.trainer
    from surge.config.run_records import LOCK_IN_DIRECTORY

    checked = []
    monkeypatch.setattr(surge.trainer, "check_cpu_threads", checked.append)

    trainer = surge.Trainer(
        max_epochs=0, default_root_dir=tmp_path, logger=False,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(Recorder(), DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2))
    said = " ".join(str(w.message) for w in caught)
    assert ("fit() trained nothing" in said) is (semantics.fit_end_words == "surge")
    assert bool(checked) is semantics.checks_cpu_threads
    claim = trainer.checkpoint_callback._claim
    assert (claim.lock.name == LOCK_IN_DIRECTORY) is (semantics.checkpoint_lock == "in_directory")


def test_a_resume_warns_of_a_full_checkpoint_directory_only_in_the_mode(semantics, tmp_path):
    data = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
    kept = dict(
        default_root_dir=tmp_path, logger=False, enable_progress_bar=False, enable_model_summary=False
    )

    def fit(epochs: int, **fit_args) -> str:
        trainer = surge.Trainer(max_epochs=epochs, **kept)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer.fit(Recorder(), data, **fit_args)
        return " ".join(str(w.message) for w in caught)

    assert "exists and is not empty" not in fit(1)  # a new run: nothing there yet
    last = next((tmp_path / "checkpoints").glob("*.ckpt"))
    resumed = fit(2, ckpt_path=str(last))
    assert ("exists and is not empty" in resumed) is semantics.warns_full_checkpoint_dir_on_resume
    assert "exists and is not empty" in fit(1)  # a new run into a used folder: warned in both


def test_a_resume_runs_the_sanity_check_only_in_the_mode_and_only_after_an_epochs_end(semantics, tmp_path):
    """`sanity_check_on_resume`: from a checkpoint written after the epoch's end, Lightning's mode
    sanity-checks (seeing the checkpoint's global step) and surge's does not; from one written
    inside the epoch neither does."""
    seen: list[int] = []

    class Sanity(surge.callbacks.Callback):
        def on_sanity_check_start(self, trainer, module):
            seen.append(trainer.global_step)

    class Validated(Recorder):
        def validation_step(self, batch, batch_idx):
            self.log("val", self.layer(batch[0]).mean())

    data = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2)
    inside = surge.callbacks.ModelCheckpoint(
        dirpath=tmp_path / "inside", every_n_train_steps=2, save_top_k=-1
    )

    def fit(epochs: int, ckpt=None, callbacks=()):
        trainer = surge.Trainer(
            max_epochs=epochs, default_root_dir=tmp_path, logger=False, enable_progress_bar=False,
            enable_model_summary=False, num_sanity_val_steps=1, callbacks=[Sanity(), *callbacks],
        )  # fmt: skip
        trainer.fit(Validated(), data, data, ckpt_path=ckpt)

    at_end = surge.callbacks.ModelCheckpoint(dirpath=tmp_path / "end")  # after the epoch's end
    fit(1, callbacks=[inside, at_end])
    assert seen == [0]
    seen.clear()
    fit(2, ckpt=str(tmp_path / "end" / "epoch=0-step=4.ckpt"))
    assert seen == ([4] if semantics.sanity_check_on_resume == "after_epoch_end" else [])
    seen.clear()
    fit(2, ckpt=str(tmp_path / "inside" / "epoch=0-step=2.ckpt"))  # written inside the epoch
    assert seen == []
