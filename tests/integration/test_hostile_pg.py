"""A production host handed hostile or careless input, with real PostgreSQL clusters: a
configuration broken after the server started, a stopped cluster beside the one applied, a
kill during the restart, a server logging into a file of its own, two clusters on one port,
a stale postmaster.pid. Each case: one clear line, the right exit code, the host as it was."""

import json
import os
from pathlib import Path

import pytest

from support import check_json, host_state, instance, pg_ctl_done, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.live]

POOL = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"


@pytest.fixture
def dirs(tmp_path):
    j, p = tmp_path / "journal", tmp_path / "root"
    p.mkdir()
    return j, p


def apply(c, j, p, *extra, env=None, timeout=300):
    return run_cli("apply", "--db", "postgres", "--instance", c.datadir, "--yes",
                   "--journal-dir", str(j), "--persist-root", str(p), *extra, env=env,
                   timeout=timeout)


def rollback(j, *extra):
    return run_cli("rollback", "--yes", "--journal-dir", str(j), *extra)


def pool() -> int:
    return int(Path(POOL).read_text())


@pytest.mark.parametrize("broken", ["shared_buffers = 'unterminated\n",
                                    "include 'postgresql.conf'\n",
                                    "shared_buffers = 'lots'\n"])
def test_configuration_broken_after_start_is_never_stopped(pg_factory, knobs, dirs, broken):
    """The files break while the server runs: check says so (crit, exit 2), apply plans
    nothing for it and never stops it, and a restart action refuses before stopping."""
    from hpadvise.changes.actions import NotStopped
    from hpadvise.plugins.postgres.actions import PgRestart
    j, p = dirs
    c = pg_factory({"shared_buffers": "64MB", "huge_pages": "try"})
    c.start()
    pid = c.pid
    with open(f"{c.datadir}/postgresql.conf", "a") as f:
        f.write(broken)
    report, r = check_json()
    assert r.returncode == 2
    [line] = [ln for ln in r.stderr.splitlines() if c.datadir in ln or f":{c.port}" in ln]
    assert "would not start again" in line
    i = instance(report, c.datadir)
    assert any(f["code"] == "pg.config.broken" and f["severity"] == "crit"
               for f in report["findings"] if f["instance"] == i["id"])
    before = host_state(c, p)
    r = apply(c, j, p, "--restart")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "would not start again" in r.stderr and "nothing can be planned" in r.stderr
    assert c.pid == pid and c.running() and host_state(c, p) == before
    a = PgRestart(engine="postgres", instance=i["id"], datadir=c.datadir, port=c.port,
                  socket_dir=c.tmp, owner="postgres", config_file=None, major=15,
                  bindir=c.bindir)
    with pytest.raises(NotStopped, match="would not start again"):
        a.set(True)
    assert c.pid == pid and c.running()


def test_a_stopped_cluster_keeps_its_pages_when_another_is_applied(pg_factory, knobs, dirs):
    """Cluster A applied (huge_pages = on), then stopped for maintenance; apply for B alone
    keeps A's pages in the pool, and A starts again on huge pages afterwards."""
    j, p = dirs
    a = pg_factory({"shared_buffers": "256MB", "huge_pages": "try"})
    b = pg_factory({"shared_buffers": "64MB", "huge_pages": "try"})
    a.start()
    b.start()
    need_a = int(a.psql("SHOW shared_memory_size_in_huge_pages"))
    need_b = int(b.psql("SHOW shared_memory_size_in_huge_pages"))
    assert apply(a, j, p, "--restart").returncode == 0
    a.stop("fast")
    r = apply(b, j, p, "--restart", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    [ch] = [x for x in out["changes"] if x["kind"] == "pool"]
    assert ch["after"] >= need_a + need_b, ch
    assert pool() >= need_a + need_b
    report, _ = check_json(env={"HPADVISE_JOURNAL_DIR": str(j)})  # check finds A there too
    assert any(f["code"] == "pool.kept" and f["instance"] == f"postgres:{a.datadir}"
               for f in report["findings"]), report["findings"]
    a.start()
    assert a.psql("SHOW huge_pages") == "on"
    assert instance(check_json()[0], a.datadir)["backing"] == "hugetlb"
    for _ in range(2):  # both applies, newest first
        assert rollback(j).returncode == 0
    a.stop("fast")  # its huge_pages is back to try: nothing holds pages now
    assert pool() == 0


def test_kill_during_the_restart_then_rollback(pg_factory, knobs, dirs):
    """apply killed while pg_ctl restarts the server (which goes on without it and comes up
    on its new settings): rollback restarts it once more and reads everything back."""
    j, p = dirs
    c = pg_factory({"shared_buffers": "128MB", "huge_pages": "try"})
    c.start()
    # dirty buffers: the shutdown checkpoint takes a while, and the kill lands in it
    c.psql("CREATE TABLE dirt AS SELECT g, repeat('x', 100) AS pad "
           "FROM generate_series(1, 300000) g")
    before = host_state(c, p)
    r = apply(c, j, p, "--restart", env={"HPADVISE_TEST_KILL_IN_RESTART": "0.1"})
    assert r.returncode == -9, r.stdout + r.stderr
    pg_ctl_done(c.datadir)  # the orphaned pg_ctl ends its restart without apply
    r = rollback(j)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "restored: restart" in r.stdout
    assert host_state(c, p) == before and pool() == 0
    assert c.running() and c.psql("SHOW huge_pages") == "try"


def test_restart_logs_where_the_server_logged(pg_factory, knobs, dirs):
    """A cluster started with pg_ctl -l FILE logs into FILE after apply's restart too; no
    temporary log is made or left."""
    j, p = dirs
    c = pg_factory({"shared_buffers": "64MB", "huge_pages": "try"})
    c.start()
    ready = "database system is ready to accept connections"
    before = Path(c.log).read_text().count(ready)
    tmp_before = {f for f in os.listdir("/tmp") if f.startswith("hpadvise-restart")}
    assert apply(c, j, p, "--restart").returncode == 0
    assert Path(c.log).read_text().count(ready) == before + 1
    assert os.readlink(f"/proc/{c.pid}/fd/1") == c.log
    assert {f for f in os.listdir("/tmp") if f.startswith("hpadvise-restart")} == tmp_before
    assert not Path(f"{c.datadir}/hpadvise-restart.log").exists()
    assert rollback(j).returncode == 0


def test_two_clusters_on_one_port(pg_factory, knobs, dirs):
    """Two clusters listening on one port, each on its own socket directory: two instances,
    named by their data directories before and after a restart; the port names neither."""
    a = pg_factory({"shared_buffers": "64MB"})
    b = pg_factory({"shared_buffers": "64MB"})
    b.configure({"port": str(a.port)})
    b.port = a.port
    a.start()
    b.start()
    report, r = check_json()
    ids = {instance(report, x.datadir)["id"] for x in (a, b)}
    assert ids == {f"postgres:{a.datadir}", f"postgres:{b.datadir}"}, ids
    r = run_cli("apply", "--db", "postgres", "--instance", str(a.port), "--dry-run")
    assert r.returncode == 2 and "names 2 instances" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    b.stop("fast")
    b.start()
    report, _ = check_json()
    assert {instance(report, x.datadir)["id"] for x in (a, b)} == ids


def test_check_leaves_a_stale_postmaster_pid_and_reads_any_case(pg_factory):
    """A stopped cluster with a stale postmaster.pid (a crash) and huge_pages = TrY: check
    --pgdata sizes it with PostgreSQL's own count and leaves the file as it was."""
    c = pg_factory({"shared_buffers": "64MB", "huge_pages": "TrY"})
    want = int(c.postgres_C("shared_memory_size_in_huge_pages"))
    stale = f"999999\n{c.datadir}\n1700000000\n{c.port}\n{c.tmp}\n\n  0 0\nready\n"
    Path(f"{c.datadir}/postmaster.pid").write_text(stale)
    report, r = check_json("--pgdata", c.datadir)
    assert r.returncode == 0, r.stderr
    i = instance(report, c.datadir)
    assert i["demand"]["pages"]["2048"] == want and i["demand"]["exact"]
    assert i["settings"]["huge_pages"] == "try"
    assert Path(f"{c.datadir}/postmaster.pid").read_text() == stale
