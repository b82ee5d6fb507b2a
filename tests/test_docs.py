"""The house in order: the README is a README, its links land, and sources are cited inside the repository.

The manual's own links and anchors are checked by `mkdocs build --strict` (scripts/test.sh, mkdocs.yml); the README
sits outside the site, so its links are checked here, anchors by the same slugs mkdocs gives the headings.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 250
LINK = re.compile(r"\]\(([^)\s]+)\)")
# Documents outside the repository that sources used to cite (notes shared with the project while it was built):
# a citation names the in-repository document or the public source instead.
OUTSIDE = re.compile(r"PRIMER|hardware-facts|STYLE\.md|\.\./shared|workload-mapping-basics")
# Files still citing them (none left: the hardware profiles' value sources now name public documents).
PENDING: set[str] = set()


def test_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) < README_MAX_LINES


def test_readme_links_land():
    slugify = pytest.importorskip("markdown.extensions.toc").slugify
    text = (ROOT / "README.md").read_text()
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        assert (ROOT / path).exists(), target
        if anchor:
            headings = re.findall(r"^#+ (.+)$", (ROOT / path).read_text(), flags=re.MULTILINE)
            assert anchor in {slugify(h, "-") for h in headings}, target


def test_sources_are_cited_inside_the_repository():
    files = [*ROOT.glob("*.md"), *ROOT.glob("docs/*.md"), *ROOT.glob("data/**/*.toml"), *ROOT.glob("data/**/*.md")]
    files += [*ROOT.glob("mapper/**/*.py"), *ROOT.glob("app_pages/*.py"), ROOT / "app.py"]
    citing = {str(p.relative_to(ROOT)) for p in files if OUTSIDE.search(p.read_text())}
    assert citing <= PENDING, sorted(citing - PENDING)


# The engine's stages as docs/architecture.md numbers them, in mapper/pipeline.py's order: a module that says
# "Stage N" says its package's number (the evidence workflow counts its own steps: "Evidence stage N").
STAGES = {"model": 1, "work": 2, "plan": 3, "cost": 4, "schedule": 5}
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}
STAGE = re.compile(r"(?<!Evidence )(?<!evidence )\b[Ss]tage (" + "|".join(NUMBERS) + r"|\d+)\b")
# Modules whose numbers come from an older count (none left).
STAGE_PENDING: set[str] = set()


def test_stage_numbers_agree():
    wrong = []
    for path in (ROOT / "mapper").rglob("*.py"):
        name = str(path.relative_to(ROOT))
        package = path.relative_to(ROOT / "mapper").parts[0]
        for word in STAGE.findall(path.read_text()):
            number = NUMBERS.get(word) or int(word)
            if STAGES.get(package) != number and name not in STAGE_PENDING:
                wrong.append((name, word))
    for package, number in STAGES.items():
        assert re.search(rf"{package}/ +stage {number}\b", (ROOT / "docs" / "architecture.md").read_text()), package
    assert wrong == []
