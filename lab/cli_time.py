#!/usr/bin/env python3
"""How much of a suite run's time its hpadvise commands took, from the file that
lab/cli_hook/sitecustomize.py writes beside it and the run's JUnit XML:

    python3 lab/cli_time.py CLI.jsonl RUN.xml      (CLI.jsonl may be kept gzipped, as .jsonl.gz)

Prints the commands by subcommand (processes, wall and CPU seconds), the share of the
host's worker (the tests that own the host, one at a time: the run's critical path) spent
in them, and the host's tests that spend the most outside them (server starts, fixtures,
roots, guests). Standard library only."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict

import suite_time
from vmstat_during import samples_of


def main(cli: str, xml: str, top: int = 20) -> None:
    rows = samples_of(cli)
    by: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    per_test: dict[str, float] = defaultdict(float)
    for r in rows:
        k = by[r["argv"][0] if r["argv"] else "(none)"]
        k[0] += 1
        k[1] += r["wall"]
        k[2] += r["cpu"]
        per_test[r["test"].rsplit(" ", 1)[0]] += r["wall"]  # "NODEID (call)": ids hold spaces
    print("| subcommand | processes | wall s | CPU s | wall s each |")
    print("|---|---:|---:|---:|---:|")
    for name, (n, wall, cpu) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"| {name} | {n} | {wall:.0f} | {cpu:.0f} | {wall / n:.2f} |")
    tests = {}
    for tc in ET.parse(xml).getroot().iter("testcase"):
        node = suite_time.nodeid(tc.get("classname", ""), tc.get("name", ""))
        if not suite_time.contained(node):
            tests[node] = float(tc.get("time") or 0)
    total = sum(tests.values())
    inside = sum(per_test.get(n, 0.0) for n in tests)
    print(f"\nThe host's worker: {len(tests)} tests, {total / 60:.1f} min, of which hpadvise's "
          f"own processes {inside / 60:.1f} min ({100 * inside / total:.0f}%).\n")
    print("| the host's tests, most time outside hpadvise's processes | test s | in them s |")
    print("|---|---:|---:|")
    rest = sorted(tests, key=lambda n: per_test.get(n, 0.0) - tests[n])
    for n in rest[:top]:
        print(f"| `{n.removeprefix('tests/integration/')}` | {tests[n]:.0f} | "
              f"{per_test.get(n, 0.0):.0f} |")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
