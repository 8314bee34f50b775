#!/usr/bin/env python3
"""Write docs/support-matrix.md from the field's table (tests/field/cells.toml) and what each
captured cell's server said of itself (tests/field/cells/ID.tar.xz, truth.json):
    python3 scripts/gen_field.py
tests/unit/test_field.py fails while the page is out of date."""

from __future__ import annotations

import json
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "field"))

import cells as field  # noqa: E402

PAGE = REPO / "docs" / "support-matrix.md"
ENGINE = {"postgres": "PostgreSQL", "mysql": "MySQL / MariaDB", "jvm": "JVM"}


def _release(cell: field.Cell) -> str:
    """The release the cell's server reported, or the table's name for it before capture."""
    if not cell.archive.is_file():
        return f"{cell.release} (not captured)"
    with tarfile.open(cell.archive) as tar:
        t = json.loads(tar.extractfile("truth.json").read())
    if t["engine"] == "postgres":
        return str(t["major"])
    return t["version"].split("-")[0] if t["engine"] == "mysql" else t["version"]


def page() -> str:
    t = field.table()
    cs = field.cells()
    out = ["# Support matrix", "",
           "Each row is a way a database server is released, started, configured and "
           "contained that hpadvise is proven against: the server was started that way for "
           "real, its host captured with `hpadvise snapshot`, and what the server said of "
           "itself (data directory, release, owner, where each setting came from, the huge "
           "pages it needs) kept beside it. The test suite replays every row through `check` "
           "and apply's planning (`--dry-run`, `--print-script`) and compares.", "",
           f"{len(cs)} cells. This page is generated from the table by "
           "`scripts/gen_field.py`; do not edit it by hand.", ""]
    for col, title in (("starts", "How it is started"), ("settings", "Where its settings are"),
                       ("where", "Where it runs")):
        out += [f"## {title}", "", "| key | meaning |", "|---|---|"]
        out += [f"| `{k}` | {v} |" for k, v in t[col].items()]
        out.append("")
    out += ["## What hpadvise reports and does", "",
            "For every cell: the server found by its process; its data directory, release "
            "and owner as the server gives them; each memory setting's source; its demand "
            "(PostgreSQL: its own `shared_memory_size_in_huge_pages`); and, by the settings "
            "column:", "", "| settings | plan |", "|---|---|"]
    out += [f"| `{k}` | {v} |" for k, v in t["expect"].items()]
    out.append("")
    for engine in ENGINE:
        rows = [c for c in cs if c.engine == engine]
        out += [f"## {ENGINE[engine]}", "", "| release | started | settings | runs in | "
                "hpadvise |", "|---|---|---|---|---|"]
        for c in rows:
            does = f"refused: {c.refused}" if c.refused else field.expectation(c)
            out.append(f"| {_release(c)} | `{c.start}` | `{c.settings}` | `{c.where}` | "
                       f"{does} |")
        out.append("")
    out += ["## Proven live instead", "",
            "Some ways a server runs cannot be held in a snapshot: what answers is asked of the "
            "live system (systemd's MainPID of a unit, Patroni's REST API, a container "
            "runtime's limits). Each is proven by a test that starts it for real:", "",
            "| engine | how it runs | test |", "|---|---|---|"]
    out += [f"| {ENGINE[r['engine']]} | {r['how']} | `{r['test']}` |"
            for r in t.get("live", [])]
    out.append("")
    if t.get("unproven"):
        out += ["## Not proven here", "",
                "Releases the table names that no server reachable by this project's test "
                "machines can prove. What hpadvise does for them is reasoned from its neighbours, "
                "not captured:", "", "| engine | what | why | hpadvise |", "|---|---|---|---|"]
        out += [f"| {ENGINE[r['engine']]} | {r['what']} | {r['why']} | {r['does']} |"
                for r in t["unproven"]]
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    PAGE.write_text(page())
    print(f"{PAGE.relative_to(REPO)} written")
