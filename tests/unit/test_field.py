"""The field's table replayed: every cell of tests/field/cells.toml was captured from a real
server (tests/field/capture.py: the snapshot, and the server's own truth beside it), and check
and apply's planning (what --dry-run and --print-script show) read it offline here. Each cell
must find the server by its process and say what the server said of itself (data directory,
release, owner, where each memory setting came from, the huge pages it needs), plan what the
table's [expect] says, and print no unknown as a value."""

from __future__ import annotations

import io
import os
import json
import shutil
import sys
import tarfile
from pathlib import Path

import pytest
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "field"))

import cells as field  # noqa: E402
from fixtures.trees import BASE  # noqa: E402
from hpadvise.act import apply as ap  # noqa: E402
from hpadvise.act import script as script_mod  # noqa: E402
from hpadvise.api.engines import Targets  # noqa: E402
from hpadvise.facts.sysroot import SysRoot  # noqa: E402
from hpadvise.outputs.render import render, to_json  # noqa: E402
from hpadvise.planning.pipeline import inspect, plan_for  # noqa: E402
from test_unknown_words import bad_words  # noqa: E402

CELLS = field.cells()


def test_the_table_is_wide_and_captured_whole():
    assert len(CELLS) >= 60
    missing = [c.id for c in CELLS if not c.archive.is_file()]
    assert not missing, f"not captured: {missing} (run tests/field/capture.py with their ids)"
    kinds = {(c.engine, c.start) for c in CELLS}
    assert len(kinds) >= 12
    assert {c.where for c in CELLS} == {"host", "root", "cgroup", "userns"}


def _tree(cell: field.Cell, tmp: Path) -> tuple[Path, dict]:
    tree = tmp / "tree"
    shutil.copytree(BASE, tree, symlinks=True)
    with tarfile.open(cell.archive) as tar:
        truth = json.loads(tar.extractfile("truth.json").read())
        for m in tar.getmembers():
            if m.name.startswith("tree/"):
                assert not m.name.startswith("tree/..") and ".." not in m.name.split("/")
                m.name = m.name[5:]
                tar.extract(m, tree, set_attrs=False)
    return tree, truth


@pytest.mark.parametrize("cell", CELLS, ids=[c.id for c in CELLS])
def test_cell(cell, tmp_path):
    if not cell.archive.is_file():
        pytest.fail(f"{cell.id} is not captured: run tests/field/capture.py {cell.id}")
    tree, truth = _tree(cell, tmp_path)
    report = inspect(SysRoot(tree), "oltp", Targets(), [cell.engine])
    mine = [i for i in report.instances if i.pid in truth["pids"]]
    assert [i.pid for i in mine] == [truth["pid"]], [(i.id, i.pid) for i in report.instances]
    inst = mine[0]
    assert not inst.errors, inst.errors
    assert inst.owner == truth["owner"]
    for secret in truth.get("secrets", ()):  # the snapshot kept none of them
        held = [str(f.relative_to(tree)) for f in tree.rglob("*")
                if f.is_file() and not f.is_symlink() and secret.encode() in f.read_bytes()]
        assert not held, (secret, held)
    s = inst.settings
    {"postgres": _postgres, "mysql": _mysql, "jvm": _jvm}[cell.engine](cell, inst, s, truth)
    plan = ap.prepare(plan_for(report, [inst]), report.engines, restart=False, persist=False,
                      read_only=True, sys_root=str(tree))
    steps = [st for st in plan.steps if st.phase == "engine"]
    placed = report.placements[inst.id]
    if cell.where == "cgroup":
        assert placed.status == "held_back", placed
        assert [(st.action.name, st.new["value"]) for st in steps] == [("huge_pages", "off")]
    elif cell.engine == "postgres":
        _pg_plan(cell, steps, plan, truth)
    elif cell.engine == "mysql":
        _my_plan(cell, steps, placed)
    if cell.start == "mysqld_safe":  # restarted through its wrapper, as it was started
        again = ap.prepare(plan_for(report, [inst]), report.engines, restart=True,
                           persist=False, read_only=True, sys_root=str(tree))
        [restart] = [st.action for st in again.steps if st.action.kind == "my_restart"]
        # the wrapper's own command line: `/bin/sh /usr/bin/mysqld_safe --defaults-file=...`
        assert [os.path.basename(a) for a in restart._argv[:2]] == ["sh", "mysqld_safe"], \
            restart._argv
        assert any(a.startswith("--defaults-file=") for a in restart._argv), restart._argv
    out = io.StringIO()
    render(report, Console(file=out, width=200, color_system=None))
    texts = {"table": out.getvalue(), "json": to_json(report),
             "dry-run": "\n".join(ap.describe(plan) + plan.notices),
             "script": script_mod.script(plan)}
    for name, text in texts.items():
        assert not bad_words(text), (name, bad_words(text))
        assert not [x for x in truth.get("secrets", ()) if x in text], name


def _postgres(cell, inst, s, truth):
    assert s["data_directory"] == truth["data_directory"]
    if truth.get("manager") == "patroni":  # named from its process and its file, offline
        assert s["manager"].startswith("Patroni (scope hpadvise-test, member member1"), s
    assert inst.version.split(".")[0] == str(truth["major"]), inst.version
    for k, where in truth["sources"].items():
        got = s["sources"].get(k, "")
        if ":" in where:  # a file and its line, as pg_settings says them
            assert where.rsplit(":", 1)[0] in got, (k, got, where)
        else:
            assert where.replace("-", " ") in got, (k, got, where)
    if truth["pages"] is not None:  # PostgreSQL 15+: its own count
        assert inst.demand.pages[2048] == truth["pages"], (inst.demand, truth["pages"])


def _pg_plan(cell, steps, plan, truth):
    if cell.start == "patroni":  # through Patroni's configuration, never behind its back
        assert [st.action.kind for st in steps] == ["patroni_params"], steps
        assert steps[0].new.get("huge_pages") == "on", steps[0].new
        assert "patronictl -c " in "\n".join(steps[0].action.shell(steps[0].new))
        return
    hp = [st for st in steps if getattr(st.action, "name", None) == "huge_pages"]
    if cell.settings == "argv":
        assert not hp, hp
        assert any("huge_pages" in n and "command line" in n for n in plan.notices), \
            plan.notices
        return
    assert len(hp) == 1 and hp[0].new["value"] == "on", hp
    assert hp[0].action.c["datadir"] == truth["data_directory"]


def _mysql(cell, inst, s, truth):
    assert s["data_directory"].rstrip("/") == truth["data_directory"]
    assert inst.version and inst.version.split("-")[0] == truth["version"].split("-")[0]
    assert s["innodb_buffer_pool_size"] in (str(truth["innodb_buffer_pool_size"]), "256M")
    src = s["sources"]
    if cell.settings == "cmdline":
        assert "command line" in src["large_pages"], src
    elif cell.settings == "persist":
        assert src["large_pages"].startswith("SET PERSIST"), src
    for k, path in truth["sources"].items():  # MySQL's own word: the file it read
        if path.startswith("/") and k != "large_pages":
            assert path in src.get(k, ""), (k, src, path)


def _my_plan(cell, steps, placed):
    lp = [st for st in steps if getattr(st.action, "name", None) == "large_pages"]
    if cell.settings in ("cmdline", "persist"):
        assert not lp and placed.status == "held_back", (lp, placed)
        assert ("command line" if cell.settings == "cmdline" else "SET PERSIST") in \
            placed.reason and "large_pages" in placed.reason, placed.reason
    else:
        assert len(lp) == 1, lp
        if cell.settings == "includedir":
            assert "/conf.d/" in lp[0].action.path, lp[0].action.path


def _jvm(cell, inst, s, truth):
    assert inst.version and inst.version.split(".")[0] == truth["version"].split(".")[0]
    assert inst.demand.pages[2048] * (2 << 20) >= truth["heap_bytes"], inst.demand
    where = {"java_argv": "command line", "jdk_java_options": "JDK_JAVA_OPTIONS",
             "java_tool_options": "JAVA_TOOL_OPTIONS",
             "underscore_java_options": "_JAVA_OPTIONS", "argfile": "@"}[cell.start]
    assert any(where in str(v) for v in (s.get("sources") or {}).values()), s


def test_every_live_row_names_a_test_that_exists():
    rows = field.table()["live"]
    assert len(rows) >= 5
    repo = Path(__file__).resolve().parents[2]
    for r in rows:
        path, name = r["test"].split("::")
        assert f"\ndef {name}(" in (repo / path).read_text(), r["test"]


def test_every_unproven_row_says_why_and_what_is_done():
    rows = field.table().get("unproven", [])
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import gen_field
    # the page has its section exactly when the table has such rows
    assert ("## Not proven here" in gen_field.page()) == bool(rows)
    for r in rows:
        assert r["engine"] in {c.engine for c in CELLS}, r
        assert len(r["why"]) > 40 and len(r["does"]) > 40, r
        # a release said to be unprovable is not among those captured
        release = r["what"].split(",")[0].split()[-1]  # "PostgreSQL 14" -> "14"
        # cells spell releases "17" or "mariadb-11.8": compared by the number
        assert not [c for c in CELLS if c.engine == r["engine"]
                    and c.release.rsplit("-", 1)[-1] == release], r


def test_the_support_matrix_page_is_the_table():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import gen_field
    page = gen_field.PAGE.read_text()
    assert page == gen_field.page(), "docs/support-matrix.md is out of date: run " \
        "scripts/gen_field.py"
    assert page.count("\n| ") >= len(CELLS) and "(not captured)" not in page
