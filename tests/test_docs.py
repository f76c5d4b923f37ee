"""Every relative link (and #anchor) in README.md, docs/*.md and docs/zh/*.md resolves to a file (and heading)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "docs" / "zh").glob("*.md")),
]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {
        slug(m.group(1))
        for m in re.finditer(r"^#+\s+(.*)$", page.read_text(encoding="utf-8"), re.M)
    }


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        file = page if not path else (page.parent / path)
        if not file.exists() or (anchor and file.suffix == ".md" and anchor not in anchors(file)):
            broken.append(target)
    assert not broken, f"{page.name}: broken links {broken}"


def test_slug_follows_github() -> None:
    assert slug("Speed: qkv vs Hugging Face") == "speed-qkv-vs-hugging-face"
    assert slug("A tour: where each idea lives") == "a-tour-where-each-idea-lives"
