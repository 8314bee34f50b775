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
