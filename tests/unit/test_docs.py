"""The README and docs render as written: every code fence closes, and the headings a
Markdown parser finds (markdown-it, CommonMark) are exactly the `#` lines outside code
blocks, so no shell comment in an example turns into a heading."""

import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "lab" / "speed.md"]


def _intended_headings(text: str) -> list[str]:
    out, fence = [], None
    for line in text.splitlines():
        m = re.match(r"^ {0,3}(`{3,}|~{3,})", line)
        if m:
            mark = m.group(1)[0]
            if fence is None:
                fence = mark
            elif fence == mark:
                fence = None
            continue
        if fence is None and re.match(r"^#{1,6} ", line):
            out.append(line.lstrip("#").strip())
    assert fence is None, "a code fence is never closed"
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_renders_as_written(page):
    text = page.read_text()
    tokens = MarkdownIt("commonmark").parse(text)
    parsed = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert parsed == _intended_headings(text)
    fences = [t for t in tokens if t.type == "fence"]
    assert len(fences) == sum(1 for ln in text.splitlines()
                              if re.match(r"^ {0,3}```", ln)) // 2


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _links(tokens) -> list[str]:
    out = []
    for t in tokens:
        for c in t.children or ():
            if c.type == "link_open":
                out.append(c.attrs.get("href", ""))
    return out


@pytest.mark.parametrize("page", [*PAGES, REPO / "lab" / "README.md"], ids=lambda p: p.name)
def test_relative_links_lead_somewhere(page):
    """Every relative link names a file of the repository (from the page's own folder) and,
    with an anchor, one of that page's headings."""
    md = MarkdownIt("commonmark")
    bad = []
    for href in _links(md.parse(page.read_text())):
        if re.match(r"[a-z]+:", href):
            continue
        path, _, anchor = href.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            bad.append(f"{href}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in {
                _slug(h) for h in _intended_headings(target.read_text())}:
            bad.append(f"{href}: no such heading")
    assert bad == []
