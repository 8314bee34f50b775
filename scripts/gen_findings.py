#!/usr/bin/env python3
"""Regenerate what the finding catalog feeds: docs/findings.md and the list of codes in
advisor/schemas/check-schema.json. Run after declaring, renaming or removing a finding code:
    .venv/bin/python scripts/gen_findings.py
tests/unit/test_findings.py fails while either is out of date."""

import json
import re
from pathlib import Path

from hpadvise.api.engines import catalog
from hpadvise.kit.findings import markdown

REPO = Path(__file__).resolve().parent.parent
SCHEMA = REPO / "advisor" / "schemas" / "check-schema.json"
CODE_LINE = re.compile(r'^(\s*"code": \{"description": [^\n]*"examples": )\[[^\n]*\]\},$', re.M)


def schema_text(text: str) -> str:
    codes = json.dumps(sorted(catalog()))
    new, n = CODE_LINE.subn(lambda m: m.group(1) + codes + "},", text)
    if n != 1:
        raise SystemExit(f"{SCHEMA}: the generated code line is missing")
    return new


if __name__ == "__main__":
    (REPO / "docs" / "findings.md").write_text(markdown(catalog()))
    SCHEMA.write_text(schema_text(SCHEMA.read_text()))
    print(f"{len(catalog())} codes: docs/findings.md and {SCHEMA.relative_to(REPO)} written")
