"""The README and docs render as written: every code fence closes, and the headings a
Markdown parser finds (markdown-it, CommonMark) are exactly the `#` lines outside code
blocks, so no shell comment in an example turns into a heading."""

from __future__ import annotations

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


def _synopsis(text: str, after: str) -> str:
    i = text.index("```\n", text.index(after)) + 4
    return text[i:text.index("```", i)]


def test_the_synopsis_names_every_command_and_agrees_with_check_md():
    from hpadvise.cli.app import command_group
    readme = _synopsis((REPO / "README.md").read_text(), "## The commands")
    assert readme == _synopsis((REPO / "docs" / "check.md").read_text(), "# hpadvise check")
    commands = command_group().commands
    missing = [c for c in commands if not re.search(rf"^hpadvise {re.escape(c)}\b", readme, re.M)]
    assert missing == [], "add them to the synopsis in README.md and docs/check.md"
    # --format and --output, which every printing command has, are said once below the block
    said_once = " ".join((REPO / "README.md").read_text().split())
    assert ("also takes `--format table|json` (`--json` is short for it) and `--output FILE`"
            in said_once)
    for name, cmd in commands.items():  # every option a command has is in its synopsis
        line = re.search(rf"^hpadvise {re.escape(name)}\b.*?(?=^hpadvise |\Z)", readme,
                         re.M | re.S).group(0)
        absent = [p.opts[0] for p in cmd.params if p.opts and p.opts[0].startswith("-")
                  and p.opts[0] != "--help"
                  and not any(re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", line)
                              for o in p.opts)]
        shared = {p.opts[0]: p for p in cmd.params if p.opts and p.opts[0] in absent}
        for opt, p in shared.items():  # left to that sentence only where it is true
            assert opt in ("--format", "--output"), (name, opt)
            assert opt == "--output" or set(p.type.choices) >= {"table", "json"}, (name, opt)


def test_the_readmes_figures_are_the_labs():
    """The figures README quotes are the recorded run's: its effect and interval, and the
    page tables of each side (the median of the runs, in MiB)."""
    import json
    import statistics
    readme = " ".join((REPO / "README.md").read_text().split())
    run = json.loads((REPO / "lab" / "results" / "select-8GB.json").read_text())
    [e] = run["effects"]
    assert (f"ran +{e['pct']:.1f}% faster select-only (95% CI +{e['lo_pct']:.1f}% .. "
            f"+{e['hi_pct']:.1f}%)") in readme
    mib = {v: statistics.median(s["page_tables_kb"] for s in run["samples"]
                                if s["variant"] == v) / 1024 for v in ("current", "recommended")}
    m = re.search(r"page tables shrank from (\d+) MiB to ([\d.]+) MiB \((\d+)x\)", readme)
    assert m, "README no longer quotes the page tables"
    assert (int(m.group(1)), float(m.group(2)), int(m.group(3))) == (
        round(mib["current"]), round(mib["recommended"], 1),
        round(mib["current"] / mib["recommended"]))


def test_the_readmes_check_example_is_checks_output(hosts):
    """README's check example shows tables check prints, in check's order, with check's
    column headings, and the sentence before it names the tables it shows."""
    import os
    import subprocess
    import sys
    text = (REPO / "README.md").read_text()
    start = text.index("(`COLUMNS=100 hpadvise check`, abridged to its ")
    said = text[start:text.index(":", start + 40)].rstrip(")")
    begin = text.index("```\n", start) + 4
    block = text[begin:text.index("\n```", begin)]
    lines = block.splitlines()
    titles = [ln for ln in lines if re.match(r"^[A-Z][A-Za-z ,()]*$", ln)]
    assert titles and said.endswith(f"{', '.join(titles[:-1])} and {titles[-1]} tables"), \
        (said, titles)
    r = subprocess.run([sys.executable, "-m", "hpadvise.cli", "check", "--root",
                        str(hosts / "pg-fallback")], capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "100"})
    real = r.stdout.splitlines()
    real_titles = [ln for ln in real if re.match(r"^[A-Z][A-Za-z ,()]*$", ln)]
    assert [t for t in real_titles if t in titles] == titles, (titles, real_titles)

    def headings(ls, title):  # the words of the table's heading lines, above its rule
        i = ls.index(title) + 1
        words = []
        while not ls[i].lstrip().startswith("─"):
            words += ls[i].split()
            i += 1
        return words
    for title in titles:  # the same words (a narrower cell wraps them otherwise)
        assert sorted(headings(lines, title)) == sorted(headings(real, title)), title


# maps keyed by data (page sizes, setting names, counters), whose keys the page describes as a
# kind, not one by one
KEYED_BY_DATA = ("settings", "pages", "mthp", "runtime_allocatable_pages", "sysctls",
                 "cmdline_params", "vmstat", "counts", "sources", "by_size", "split",
                 "held_split", "unused_pages", "free_blocks")


def test_the_schema_page_is_made_from_the_schemas():
    """docs/json-schema.md is the schemas' own descriptions (scripts/gen_schema_page.py): a
    description changed in a schema and not regenerated fails here, and so does a hand edit
    of the page."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("gen_schema_page",
                                                  REPO / "scripts" / "gen_schema_page.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (REPO / "docs" / "json-schema.md").read_text() == gen.page(), \
        "docs/json-schema.md is out of date: run scripts/gen_schema_page.py"
    # every other schema the package ships is on the page
    shipped = {p.name.removesuffix("-schema.json") for p in gen.SCHEMAS.glob("*-schema.json")}
    assert shipped == {"check", *gen.OTHERS}, shipped


@pytest.mark.parametrize("state", ["pg-fallback", "mariadb-jvm", "pool-1g", "zgc-thp",
                                   "pg-cgroup-v2", "mthp-always", "pg-patroni", "fragmented"])
def test_every_field_check_writes_is_on_the_schema_page(hosts, state):
    """docs/json-schema.md names every field a real `check --json` has: a field added to the
    output and not to the page fails here."""
    import json
    import subprocess
    import sys
    page = (REPO / "docs" / "json-schema.md").read_text()
    named = {w for code in re.findall(r"`([^`]+)`", page) for w in re.findall(r"[a-z_0-9]+", code)}
    r = subprocess.run([sys.executable, "-m", "hpadvise.cli", "check", "--json", "--root",
                        str(hosts / state)], capture_output=True, text=True)
    missing: set[str] = set()

    def walk(x, path: str) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                if k not in named:
                    missing.add(f"{path}.{k}")
                if k not in KEYED_BY_DATA:
                    walk(v, f"{path}.{k}")
        elif isinstance(x, list):
            for v in x:
                walk(v, f"{path}[]")
    walk(json.loads(r.stdout), "")
    assert not missing, sorted(missing)
