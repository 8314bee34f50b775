"""apply --root SNAPSHOT --dry-run: the plan for the host a snapshot holds, offline, from the
field's captured cells (each a real server's snapshot, tests/field/capture.py). The values
before each change are the snapshot's, the paths the captured host's own; nothing of the
snapshot is written. Where a snapshot cannot be planned for (a change asked for, a script for
this host, files persisted elsewhere, a directory that is not a snapshot), one line and exit 2."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "field"))

import cells as field  # noqa: E402
from support import run_cli  # noqa: E402
from test_field import _tree  # noqa: E402

pytestmark = pytest.mark.contained
POOL = "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
# one cell per engine, each in a root of its own or on the host
CELLS = {c.id: c for c in field.cells()}
IDS = ("postgres-14-ctlcluster-confd-root", "mysql-mysql-97-entrypoint-includedir-root",
       "jvm-17-java-argv-flags-host")


def _digest(tree: Path) -> dict[str, str]:
    return {str(p.relative_to(tree)): hashlib.sha256(p.read_bytes()).hexdigest()
            if p.is_file() and not p.is_symlink() else "-" for p in sorted(tree.rglob("*"))}


@pytest.mark.parametrize("cid", IDS)
def test_a_snapshots_plan_is_read_from_it_and_names_its_hosts_paths(cid, tmp_path):
    cell = CELLS[cid]
    tree, truth = _tree(cell, tmp_path)
    was = _digest(tree)
    r = run_cli("check", "--root", str(tree), "--db", cell.engine, "--json")
    assert r.returncode == 0, r.stderr
    [iid] = [i["id"] for i in json.loads(r.stdout)["instances"] if i.get("pid") == truth["pid"]]
    r = run_cli("apply", "--db", cell.engine, "--root", str(tree), "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    assert str(tmp_path) not in r.stdout, r.stdout  # the captured host's paths, as it names them
    plan = json.loads(r.stdout)
    by_kind = {}
    for ch in plan["changes"]:
        by_kind.setdefault(ch["kind"], []).append(ch)
    # the pool as the snapshot had it, grown for what its servers need
    [pool] = by_kind["pool"]
    assert pool["before"] == int((tree / POOL).read_text()), pool
    assert pool["after"] > pool["before"] and iid in pool["why"], pool
    mine = [ch for ch in plan["changes"] if ch["instance"] == iid]
    if cell.engine == "postgres":  # ALTER SYSTEM, from the setting the snapshot's files hold
        assert [(c["target"], c["before"], c["after"]) for c in mine] == \
            [(f"huge_pages ({iid})", None, "on")], mine
        assert any(f"-D {truth['data_directory']}" in n for n in plan["notices"]), plan
    elif cell.engine == "mysql":  # large_pages in the conf.d file its image reads
        [opt] = [c for c in mine if c["kind"] == "my_option"]
        assert opt["target"] == "large_pages in /etc/mysql/conf.d/hplab.cnf", opt
    else:  # a JVM's flags are where it is started: no change of its own, a restart to take
        assert not mine and iid in plan["restart_needed"], plan
    text = run_cli("apply", "--db", cell.engine, "--root", str(tree), "--dry-run")
    head, *rest = text.stdout.splitlines()
    assert text.returncode == 0 and f"the host as the snapshot in {tree} holds it" in head
    assert rest and str(tmp_path) not in "\n".join(rest), text.stdout
    assert _digest(tree) == was


@pytest.mark.parametrize("args,says", [
    ((), "a snapshot's plan can only be shown; add --dry-run"),
    (("--yes",), "a snapshot's plan can only be shown; add --dry-run"),
    (("--print-script",), "use --dry-run with --root"),
    (("--dry-run", "--persist-root", "/tmp"), "leave out --persist-root"),
], ids=["no-dry-run", "yes", "print-script", "persist-root"])
def test_what_a_snapshot_cannot_be_planned_for_is_one_line(args, says, tmp_path):
    tree, _ = _tree(CELLS[IDS[0]], tmp_path)
    was = _digest(tree)
    r = run_cli("apply", "--db", "postgres", "--root", str(tree), *args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count("\n") == 1 and says in r.stderr, r.stderr
    assert r.stdout == "" and _digest(tree) == was


def test_a_directory_that_is_no_snapshot_is_refused(tmp_path):
    r = run_cli("apply", "--db", "postgres", "--root", str(tmp_path), "--dry-run")
    assert r.returncode == 2 and "not a snapshot" in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and r.stdout == ""


def test_a_server_on_the_snapshots_own_host_is_read_in_the_snapshot(tmp_path):
    """The base tree's PostgreSQL shares its host's root: its postgresql.auto.conf is the
    snapshot's, not this machine's, and says what the value before is."""
    tree, _ = _tree(CELLS[IDS[0]], tmp_path)
    auto = tree / "var/lib/postgresql/15/main/postgresql.auto.conf"
    auto.write_text(auto.read_text() + "huge_pages = 'try'\n")
    r = run_cli("apply", "--db", "postgres", "--root", str(tree), "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    [ch] = [c for c in json.loads(r.stdout)["changes"] if c["instance"] == "postgres:5432"]
    assert (ch["before"], ch["after"], ch["before_unknown"]) == ("try", "on", None), ch


@pytest.mark.parametrize("how", ["relative", "trailing-slash", "dot"])
def test_the_snapshot_is_named_as_the_user_gave_it_and_its_paths_are_the_hosts(how, tmp_path):
    tree, _ = _tree(CELLS[IDS[0]], tmp_path)
    root = {"relative": "tree", "trailing-slash": f"{tree}/", "dot": f"{tree}/."}[how]
    r = subprocess.run([sys.executable, "-m", "hpadvise.cli", "apply", "--db", "postgres",
                        "--root", root, "--dry-run", "--json"], capture_output=True,
                       text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    targets = [c["target"] for c in json.loads(r.stdout)["changes"]]
    assert "/etc/sysctl.d/60-hpadvise.conf" in targets, targets
    assert str(tmp_path) not in r.stdout and "//" not in "".join(targets), targets


def test_a_restart_of_a_snapshots_servers_is_refused(tmp_path):
    tree, _ = _tree(CELLS[IDS[0]], tmp_path)
    r = run_cli("apply", "--db", "postgres", "--root", str(tree), "--dry-run", "--restart")
    assert r.returncode == 2 and "leave out --restart" in r.stderr and r.stdout == "", r.stderr


@pytest.mark.parametrize("cid", IDS)
def test_apply_builds_the_plan_once_the_same_as_checks_plan_narrowed(cid, tmp_path,
                                                                      monkeypatch):
    """apply reads every engine's instances and builds one plan, for its selection and the
    stopped instances the pools keep pages for; it is the plan check's report narrowed to the
    same selection gives (pipeline.plan_for), change for change."""
    from hpadvise.act import applying
    from hpadvise.act.apply import prepare
    from hpadvise.api.model import Targets
    from hpadvise.facts.sysroot import SysRoot, planning_snapshot, snapshot_root
    from hpadvise.planning import pipeline
    cell = CELLS[cid]
    tree, _ = _tree(cell, tmp_path)
    built = []
    real = pipeline.build
    monkeypatch.setattr(pipeline, "build", lambda *a, **k: built.append(a[1]) or real(*a, **k))
    p = applying.plan(applying.Request([cell.engine], root=str(tree), read_only=True))
    assert len(built) == 1, [[i.id for i in b] for b in built]
    assert {i.engine for i in built[0] if i.running} == {cell.engine}
    root = snapshot_root(str(tree))
    report = pipeline.inspect(SysRoot(root), "oltp", Targets(), None)
    with planning_snapshot(root):
        old = prepare(pipeline.plan_for(report, pipeline.select(report, [cell.engine], None)),
                      report.engines, restart=False, persist=True, persist_root=root,
                      read_only=True, sys_root=root)
    assert applying.plan_json(p, root) == applying.plan_json(old, root)
    assert p.changes and len(p.changes) == len(old.changes)
