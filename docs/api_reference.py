"""Build surge's API reference from its docstrings (HTML, with pdoc) and check every link in it.

    python docs/api_reference.py [OUT]      # default: build/api; open OUT/index.html

The reference covers the public modules below, each limited to its `__all__`. A link to a page or
an anchor that does not exist fails the build (exit status 1, each broken link named).
`tests/test_api_reference.py` builds it in CI.
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urldefrag

PUBLIC = [
    "surge",  # with the packages of its __all__: callbacks, loggers, profiler, strategies
    "surge.precision",
    "surge.tune",
    "surge.data",
    "surge.checkpoint",
    "surge.checkpoint.sharded",
    "surge.launch",
    "surge.errors",
    "surge.stage_cli.config",
    "surge.demo",
    # where the Trainer's, the Module's and the strategies' inherited members are defined, so that
    # each has a page and an anchor to link to
    "surge.trainer.properties",
    "surge.trainer.stages",
    "surge.module.hparams",
    "surge.strategies.parallel",
]


def build(out: Path) -> list[Path]:
    """Write the reference to `out`; the HTML pages written."""
    import pdoc
    import pdoc.render

    pdoc.render.configure(docformat="markdown", footer_text="surge API reference", search=True)
    pdoc.pdoc(*PUBLIC, output_directory=out)
    return sorted(out.rglob("*.html"))


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"] or "")
        if tag == "a" and values.get("href"):
            self.links.append(values["href"] or "")


def broken_links(out: Path) -> list[str]:
    """Every link of the reference to a page or anchor of it that does not exist ("page -> link")."""
    pages = {}
    for path in out.rglob("*.html"):
        page = _Page()
        page.feed(path.read_text())
        pages[path.resolve()] = page
    broken = []
    for path, page in pages.items():
        for link in page.links:
            if re.match(r"^[a-z]+:", link):  # http(s), mailto: outside the reference
                continue
            target, anchor = urldefrag(link)
            where = (path.parent / target).resolve() if target else path
            found = pages.get(where)
            if found is None or (anchor and anchor not in found.ids):
                broken.append(f"{path.relative_to(out.resolve())} -> {link}")
    return sorted(set(broken))


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else "build/api")
    pages = build(out)
    broken = broken_links(out)
    for line in broken:
        print(f"broken link: {line}", file=sys.stderr)
    print(f"{len(pages)} pages in {out}; {len(broken)} broken links")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
