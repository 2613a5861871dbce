"""The API reference (docs/api_reference.py, pdoc over the public modules' docstrings) builds, covers
every public name, and has no link to a page or an anchor that does not exist."""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("pdoc", reason="the API reference is built with pdoc (test extra)")

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("api_reference", ROOT / "docs" / "api_reference.py")
api_reference = importlib.util.module_from_spec(spec)
sys.modules["api_reference"] = api_reference
spec.loader.exec_module(api_reference)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("api")
    assert api_reference.main([str(out)]) == 0  # 0: built, and no broken link
    return out


def page_of(out: Path, module: str) -> str:
    parts = module.split(".")
    return (out.joinpath(*parts[:-1], parts[-1] + ".html")).read_text()


def test_every_public_name_has_its_entry(reference):
    for module in api_reference.PUBLIC:
        names = getattr(importlib.import_module(module), "__all__", [])
        page = page_of(reference, module)
        submodules = (
            {n for n in names if importlib.util.find_spec(f"{module}.{n}") is not None}
            if module == "surge"
            else set()
        )
        missing = [n for n in names if n not in submodules and f'id="{n}"' not in page]
        assert not missing, f"{module}: {missing}"


def test_the_trainer_and_the_module_show_their_methods_and_views(reference):
    page = page_of(reference, "surge")
    for anchor in ("Trainer.fit", "Trainer.validate", "Trainer.export", "Module.training_step", "Module.log"):
        assert f'id="{anchor}"' in page, anchor
    assert re.search(r'id="\w+\.global_step"', page_of(reference, "surge.trainer.properties"))


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "a.html").write_text(
        '<a href="b.html#here">b</a> <a href="#gone">self</a> <a href="https://x.org">out</a>'
    )
    (tmp_path / "b.html").write_text('<h1 id="elsewhere">b</h1>')
    assert api_reference.broken_links(tmp_path) == ["a.html -> #gone", "a.html -> b.html#here"]
