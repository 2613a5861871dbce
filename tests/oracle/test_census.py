"""The census of the Lightning names real projects import (tests/oracle/census.py, its data in
census_projects.json): under surge's Lightning mode no name Lightning 2.6.6 has fails at import (each is
provided or refused by name when used), and the shares of projects that get past their imports, and
whose every name is provided, are not below the figures docs/lightning.md gives."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from census import ABSENT, AT_IMPORT, AT_USE, PROVIDED, Census, scan_sources

DOCS = Path(__file__).resolve().parents[2] / "docs" / "lightning.md"
PUBLISHED = re.compile(
    r"Every import gets past in \*\*(\d+) of (\d+)\*\* projects; of the (\d+) whose imports all exist\s+"
    r"in Lightning 2\.6\.6, in \*\*(\d+) of \3\*\*, and every name they import is provided\s+"
    r"\(none refused at use\) in \*\*(\d+) of \3\*\*"
)


@pytest.fixture(scope="module")
def census() -> Census:
    return Census.load()  # one subprocess imports every name under the mode


def test_no_name_lightning_has_fails_at_import(census: Census) -> None:
    names = {n for p in census.data["projects"] for n in p["names"] + p["guarded"] + p["configs"]}
    verdicts = {n: census.verdict(n) for n in names}
    assert not {n: why for n, (which, why) in verdicts.items() if which == AT_IMPORT}
    refused = [why for which, why in verdicts.values() if which == AT_USE]
    assert refused and all(
        re.search(r"is not provided by surge \(.+\)", why) for why in refused
    )  # the reason
    assert {which for which, _ in verdicts.values()} <= {PROVIDED, AT_USE, ABSENT}


def test_share_not_below_published(census: Census) -> None:
    published = PUBLISHED.search(DOCS.read_text())
    assert published, "docs/lightning.md lost the census figure"
    passing, total, current_passing, current, provided = census.shares()
    assert total >= 30 and (total, current) == (int(published[2]), int(published[3]))
    assert (
        passing >= int(published[1])
        and current_passing >= int(published[4])
        and provided >= int(published[5])
    )
    assert current_passing == current  # every project whose names exist in Lightning gets past its imports


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
