#!/usr/bin/env python3
"""Where the suite's time goes, from a run's JUnit XML (`scripts/test.sh --junitxml=FILE`, each
test's time being its setup, call and teardown together): the slowest tests, and the time by
kind of work (the kinds are told apart by the test's file). Prints Markdown for
lab/suite-time.md:
    python3 lab/suite_time.py RUN.xml [LABEL]
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

# kind of work -> test files (by name) whose time is mostly that kind
KINDS = (
    ("unit and snapshot tests", ("tests/unit/", "tests.unit.")),
    ("validate end to end (benchmark runs, scratch servers)", ("test_validate", "test_tpcc",
                                                                "test_capture")),
    ("guests booted under QEMU", ("guest", "test_kvm_live")),
    ("servers in Debian roots and runc", ("test_own_roots", "test_roots_lab", "test_runc",
                                          "test_python39", "test_pyz")),
    ("Patroni, Ansible, sshd", ("test_patroni", "test_ansible")),
    ("live servers on the host (start, stop, initdb)", ("_live", "test_pg_", "test_my_",
                                                        "test_hostile", "test_stopped",
                                                        "test_setting_layers", "test_size",
                                                        "test_jvm", "test_interruptions",
                                                        "test_secrets", "test_nonroot",
                                                        "test_bad_input", "test_k8s")),
)


def kind_of(path: str) -> str:
    for kind, marks in KINDS:
        if any(m in path for m in marks):
            return kind
    return "other integration tests"


def nodeid(classname: str, name: str) -> str:
    """The pytest node ID of a JUnit test case (tests.integration.test_x + test_y[a] ->
    tests/integration/test_x.py::test_y[a]), as tests/hostlock.py lists the contained ones."""
    return classname.replace(".", "/") + ".py::" + name


def contained(node: str) -> bool:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import hostlock
    return hostlock.contained(node)


def main(xml: str, label: str = "") -> str:
    cases, side = [], {}
    for tc in ET.parse(xml).getroot().iter("testcase"):
        name = f"{tc.get('classname', '')}.{tc.get('name', '')}"
        failed = tc.find("failure") is not None or tc.find("error") is not None
        cases.append((float(tc.get("time") or 0), name, failed))
        own = contained(nodeid(tc.get("classname", ""), tc.get("name", "")))
        side[own] = side.get(own, 0.0) + cases[-1][0]
    total = sum(t for t, _, _ in cases)
    by: dict[str, list[float]] = {}
    for t, name, _ in cases:
        by.setdefault(kind_of(name.replace(".", "/") + " " + name), []).append(t)
    out = [f"### {label or xml}", "",
           f"{len(cases)} tests, {total / 60:.1f} min of test time "
           f"({sum(f for _, _, f in cases)} failed).", "",
           "| kind of work | tests | minutes | share |", "|---|---:|---:|---:|"]
    for kind, ts in sorted(by.items(), key=lambda kv: -sum(kv[1])):
        out.append(f"| {kind} | {len(ts)} | {sum(ts) / 60:.1f} | "
                   f"{100 * sum(ts) / total:.0f}% |")
    out += ["", "The tests that own the host run one at a time, in one worker: "
            f"{side.get(False, 0) / 60:.1f} min, the run's critical path; the contained ones "
            f"beside them: {side.get(True, 0) / 60:.1f} min."]
    out += ["", "| the 30 slowest tests | seconds |", "|---|---:|"]
    for t, name, _ in sorted(cases, reverse=True)[:30]:
        out.append(f"| `{name.removeprefix('tests.')}` | {t:.0f} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(main(*sys.argv[1:3]))
