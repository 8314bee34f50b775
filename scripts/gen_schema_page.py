#!/usr/bin/env python3
"""Regenerate docs/json-schema.md from the JSON Schemas the package ships (advisor/schemas/):
check's fields with the `description` of each, and every other command's output with its
schema's own `description`. Run after changing a schema's description:
    .venv/bin/python scripts/gen_schema_page.py
tests/unit/test_docs.py fails while the page is out of date, and while a field check writes
is named nowhere on it."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCHEMAS = REPO / "advisor" / "schemas"
PAGE = REPO / "docs" / "json-schema.md"

# check's rows: the field as the page names it, and where its description is in the schema
CHECK_ROWS = (
    ("schema_version", "properties/schema_version"),
    ("hpadvise_version", "properties/hpadvise_version"),
    ("checked_at", "properties/checked_at"),
    ("profile", "properties/profile"),
    ("host", "properties/host"),
    ("instances[]", "properties/instances"),
    ("instances[].demand", "$defs/instance/properties/demand"),
    ("findings[]", "properties/findings"),
    ("plan.pools[]", "properties/plan/properties/pools"),
    ("plan.changes[]", "properties/plan/properties/changes"),
    ("plan.placements[]", "properties/plan/properties/placements"),
    ("plan.unused_pages", "properties/plan/properties/unused_pages"),
    ("plan.boot[]", "properties/plan/properties/boot"),
    ("plan.blocked", "properties/plan/properties/blocked"),
    ("summary", "properties/summary"),
    ("notes", "properties/notes"),
    ("errors", "properties/errors"),
)
# the other commands' outputs, in the page's order (each schema's title names its command)
OTHERS = ("apply", "validate", "history", "engines", "rollback", "size", "report", "k8s",
          "probe", "profiles")

HEAD = """# `hpadvise check --json`: schema version 1

The machine-readable schema is `advisor/schemas/check-schema.json` (installed as
`hpadvise/schemas/check-schema.json`, JSON Schema 2020-12); tests validate every report against it.
`schema_version` changes when a field is removed or changes meaning; new fields may appear
within a version. This page is made from the schemas' own descriptions
(`scripts/gen_schema_page.py`).

| field | meaning |
|---|---|
"""
CODES = """
Every finding code, with its severity, title, source and the engine that declares it, is in
[findings.md](findings.md); the schema lists the same codes (`$defs.code.examples`; a code of
a third party's engine passes by its pattern), both generated from the catalog in the code.

## The other commands

Every command that reports takes `--format` (`--json` is short for `--format json`) and, where
it writes a report, `--output FILE` (replaced atomically). Each JSON output has a JSON Schema
shipped with the package, and the tests check real outputs against it.

| command | schema | shape |
|---|---|---|
| `check --format json` | `hpadvise/schemas/check-schema.json` | above |
| `check --format prometheus` | [prometheus.md](prometheus.md) | text exposition format |
"""


def schema(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}-schema.json").read_text())


def at(doc: dict, pointer: str) -> str:
    node = doc
    for part in pointer.split("/"):
        node = node[part]
    if "description" not in node:
        raise SystemExit(f"check-schema.json: {pointer} has no description")
    return node["description"]


def page() -> str:
    check = schema("check")
    rows = [f"| `{field}` | {at(check, ptr)} |" for field, ptr in CHECK_ROWS]
    others = []
    for name in OTHERS:
        s = schema(name)
        command = s["title"].removeprefix("hpadvise ")
        others.append(f"| `{command}` | `hpadvise/schemas/{name}-schema.json` | "
                      f"{s['description']} |")
    return HEAD + "\n".join(rows) + "\n" + CODES + "\n".join(others) + "\n"


if __name__ == "__main__":
    PAGE.write_text(page())
    print(f"{PAGE.relative_to(REPO)} written")
