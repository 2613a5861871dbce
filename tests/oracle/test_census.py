"""The census of the Lightning names real projects import (tests/oracle/census.py, its data in
census_projects.json): under surge's Lightning mode every name either resolves or is refused by name,
and the share of projects whose every import resolves is not below the figure docs/lightning.md gives."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from census import ABSENT, MISSING, REFUSED, RESOLVES, Census, scan_sources

DOCS = Path(__file__).resolve().parents[2] / "docs" / "lightning.md"
PUBLISHED = re.compile(
    r"Every import resolves in \*\*(\d+) of (\d+)\*\* projects; of the (\d+) whose imports all exist\s+"
    r"in Lightning 2\.6\.6, in \*\*(\d+) of \3\*\*"
)


@pytest.fixture(scope="module")
def census() -> Census:
    return Census.load()  # one subprocess imports every name under the mode


def test_no_name_is_missing(census: Census) -> None:
    names = {n for p in census.data["projects"] for n in p["names"] + p["guarded"] + p["configs"]}
    verdicts = {n: census.verdict(n) for n in names}
    assert not {n: why for n, (which, why) in verdicts.items() if which == MISSING}
    refused = [why for which, why in verdicts.values() if which == REFUSED]
    assert refused and all("is not provided by surge" in why or "surge has no" in why for why in refused)
    assert {which for which, _ in verdicts.values()} <= {RESOLVES, REFUSED, ABSENT}


def test_share_not_below_published(census: Census) -> None:
    published = PUBLISHED.search(DOCS.read_text())
    assert published, "docs/lightning.md lost the census figure"
    passing, total, current_passing, current = census.shares()
    assert total >= 30 and (total, current) == (int(published[2]), int(published[3]))
    assert passing >= int(published[1]) and current_passing >= int(published[4])


def test_scanner_follows_aliases_guards_and_configs() -> None:
    code = """
import pytorch_lightning as pl
import lightning.pytorch
from lightning.pytorch import loggers as pl_loggers
from lightning.pytorch.utilities.rank_zero import rank_zero_only
try:
    from pytorch_lightning.utilities.distributed import rank_zero_warn
except ImportError:
    pass
trainer = pl.Trainer(callbacks=[pl.callbacks.ModelCheckpoint(), pl.callbacks.EarlyStopping.mode_dict])
logger = pl_loggers.CSVLogger("logs")
lightning.pytorch.seed_everything(0)
"""
    config = "trainer:\n  _target_: lightning.pytorch.Trainer\ncallbacks:\n  - class_path: lightning.pytorch.callbacks.Timer\n"
    names, files = scan_sources([("train.py", code), ("conf/trainer.yaml", config)])
    assert files == 2
    assert names.result() == (
        [
            "lightning.pytorch",
            "lightning.pytorch.utilities.rank_zero:rank_zero_only",
            "lightning.pytorch:loggers",
            "lightning.pytorch:loggers.CSVLogger",
            "lightning:pytorch.seed_everything",
            "pytorch_lightning",
            "pytorch_lightning:Trainer",
            "pytorch_lightning:callbacks.EarlyStopping",
            "pytorch_lightning:callbacks.ModelCheckpoint",
        ],
        ["pytorch_lightning.utilities.distributed:rank_zero_warn"],
        ["lightning.pytorch.callbacks:Timer", "lightning.pytorch:Trainer"],
    )
