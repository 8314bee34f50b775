"""The finding catalog: every code raised is declared once, every declared code is raised
somewhere, and what is generated from the catalog (docs/findings.md, the JSON schema's code
list) matches it."""

import ast
import json
import sys
from pathlib import Path

import pytest

from hpadvise.api.engines import catalog
from hpadvise.kit.findings import CORE, Code, Codes, markdown

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import gen_findings  # noqa: E402


def sources():
    return [*(REPO / "advisor").rglob("*.py"), *(REPO / "plugins").rglob("*.py")]


def raised_codes() -> tuple[set[str], set[str]]:
    """Codes the source raises: CODES["x"] / CORE["x"] lookups, and the constant prefixes of
    f-string lookups (CORE[f"thp.{knob}"])."""
    exact, prefixes = set(), set()
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) \
                    and node.value.id.endswith(("CODES", "CORE")):
                key = node.slice
                if isinstance(key, ast.Constant):
                    exact.add(key.value)
                elif isinstance(key, ast.JoinedStr) and isinstance(key.values[0], ast.Constant):
                    prefixes.add(key.values[0].value)
    return exact, prefixes


def test_every_raised_code_is_declared_and_every_declared_one_raised():
    declared = set(catalog())
    exact, prefixes = raised_codes()
    assert exact - declared == set(), "raised but not declared"
    unused = {c for c in declared - exact if not any(c.startswith(p) for p in prefixes)}
    assert unused == set(), "declared but never raised"
    for p in prefixes:
        assert any(c.startswith(p) for c in declared), p


def test_findings_are_made_only_from_declared_codes():
    direct = [f"{p.relative_to(REPO)}:{n.lineno}" for p in sources() if p.name != "findings.py"
              or p.parent.name != "kit" for n in ast.walk(ast.parse(p.read_text()))
              if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "Finding"]
    assert direct == [], "build findings from a declared Code, not Finding(...)"


def test_generated_files_match_the_catalog():
    assert (REPO / "docs" / "findings.md").read_text() == markdown(catalog()), \
        "docs/findings.md is out of date: run scripts/gen_findings.py"
    schema = (REPO / "advisor" / "schemas" / "check-schema.json").read_text()
    assert gen_findings.schema_text(schema) == schema, \
        "the schema's code list is out of date: run scripts/gen_findings.py"
    enum = json.loads(schema)["$defs"]["code"]["examples"]
    assert enum == sorted(catalog()) and "pg.huge_pages.fallback" in enum


def test_a_code_keeps_to_its_declared_severities():
    c = Code("x.y", "warn", "Title", "src", ("info",))
    f = c("why", "ev", "i1", severity="info")
    assert (f.severity, f.code, f.title, f.source, f.instance) == ("info", "x.y", "Title", "src",
                                                                   "i1")
    with pytest.raises(ValueError, match="not declared with severity 'crit'"):
        c("why", severity="crit")
    with pytest.raises(ValueError, match="declared twice"):
        Codes(c, c)
    assert CORE["pool.unused"]("why").severity == "warn"
