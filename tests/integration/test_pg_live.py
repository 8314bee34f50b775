"""Live: real pools on this kernel, a real cluster on them. Every knob is restored by the
`knobs` fixture, also when a test fails."""

import pytest

from support import check_json, instance

pytestmark = [pytest.mark.integration, pytest.mark.live]


def pool_change(report, size_kb):
    return next(c for c in report["plan"]["changes"]
                if c["target"] == f"hugepages-{size_kb}kB/nr_hugepages")


def test_recommended_pool_runs_on_huge_pages_and_one_less_does_not_start(pg_factory, knobs):
    c = pg_factory({"shared_buffers": "256MB", "huge_pages": "on"})
    report, r = check_json("--pgdata", c.datadir)
    assert r.returncode == 0, r.stderr
    need = instance(report, c.datadir)["demand"]["pages"]["2048"]
    assert need == int(c.postgres_C("shared_memory_size_in_huge_pages"))
    target = pool_change(report, 2048)["recommended"]
    assert target >= need

    # one page fewer than PostgreSQL's count: huge_pages=on refuses to start
    assert knobs.pool(2048, need - 1) == need - 1
    r = c.start(check=False)
    assert r.returncode != 0
    assert "could not map anonymous shared memory" in c.logtail()

    # exactly the recommended pool: it starts, and check sees it on huge pages
    assert knobs.pool(2048, target) == target
    c.start()
    report, r = check_json()
    i = instance(report, c.datadir)
    assert i["backing"] == "hugetlb" and i["backing_page_kb"] == 2048
    codes = {f["code"]: f["severity"] for f in report["findings"] if f["instance"] == i["id"]}
    assert codes.get("pg.huge_pages.active") == "ok"
    assert "pg.huge_pages.fallback" not in codes
    # the running instance's pages are counted once, not as a foreign user
    pool = next(p for p in report["plan"]["pools"] if p["size_kb"] == 2048)
    assert pool["foreign_pages"] == 0


def test_try_without_pool_is_reported_as_silent_fallback(pg_factory, knobs):
    knobs.pool(2048, 0)
    c = pg_factory({"shared_buffers": "128MB", "huge_pages": "try"})
    c.start()
    report, r = check_json("--fail-on", "crit")
    assert r.returncode == 1  # crit reached
    i = instance(report, c.datadir)
    assert i["backing"] == "4k"
    f = [f for f in report["findings"] if f["instance"] == i["id"]]
    assert any(x["code"] == "pg.huge_pages.fallback" and x["severity"] == "crit" for x in f)
    assert any(ch["target"] == "huge_pages" and ch["recommended"] == "on"
               and ch["instance"] == i["id"] for ch in report["plan"]["changes"])


def test_1gb_pages_with_huge_page_size(pg_factory, knobs):
    c = pg_factory({"shared_buffers": "512MB", "huge_pages": "on", "huge_page_size": "1GB"})
    need = int(c.postgres_C("shared_memory_size_in_huge_pages"))
    report, _ = check_json("--pgdata", c.datadir)
    d = instance(report, c.datadir)["demand"]
    assert d["page_kb"] == 1048576 and d["pages"]["1048576"] == need
    got = knobs.pool(1048576, need)
    if got < need:
        pytest.skip(f"kernel granted only {got} of {need} 1 GiB pages at runtime")
    c.start()
    report, _ = check_json()
    i = instance(report, c.datadir)
    assert i["backing"] == "hugetlb" and i["backing_page_kb"] == 1048576


def test_check_changes_nothing(pg_factory, knobs):
    import glob
    from pathlib import Path

    def state():
        files = glob.glob("/sys/kernel/mm/hugepages/*/nr_hugepages") + [
            f"/sys/kernel/mm/transparent_hugepage/{k}" for k in ("enabled", "defrag",
                                                                  "shmem_enabled")]
        return {f: Path(f).read_text() for f in files}

    c = pg_factory({"shared_buffers": "64MB"})
    c.start()
    before = state()
    conf = Path(f"{c.datadir}/postgresql.auto.conf").read_text()
    check_json()
    check_json("--pgdata", c.datadir)
    assert state() == before
    assert Path(f"{c.datadir}/postgresql.auto.conf").read_text() == conf


def test_shmem_thp_is_seen_and_enabled_is_not_the_knob(pg_factory, knobs):
    """PostgreSQL's shared memory is shmem: THP reaches it through shmem_enabled only."""
    from support import THP
    knobs.set(f"{THP}/enabled", "always")
    knobs.set(f"{THP}/shmem_enabled", "never")
    c = pg_factory({"shared_buffers": "256MB", "huge_pages": "off"})
    c.start()
    c.psql("CREATE TABLE t AS SELECT g, repeat('x', 500) AS pad FROM generate_series(1, 200000) g")
    report, _ = check_json()
    i = instance(report, c.datadir)
    assert i["backing"] == "4k"
    codes = {f["code"] for f in report["findings"] if f["instance"] == i["id"]}
    assert "pg.thp.enabled_not_shmem" in codes and "pg.huge_pages.off" in codes
    c.stop()

    knobs.set(f"{THP}/shmem_enabled", "always")
    c.start()
    c.psql("SELECT count(*) FROM t")
    report, _ = check_json()
    i = instance(report, c.datadir)
    assert i["backing"] == "thp"
    codes = {f["code"] for f in report["findings"] if f["instance"] == i["id"]}
    assert "pg.thp.shmem" in codes
    thp = {x["target"]: x for x in report["plan"]["changes"] if x["kind"] == "thp"}
    # advise, not never: a process maps shmem THP now (PostgreSQL itself, under always), and a
    # plan keeps shmem_enabled at advise while one does; PostgreSQL, which madvises nothing,
    # gets none under advise, as the profile wants
    assert thp["transparent_hugepage/shmem_enabled"]["recommended"] == "advise"
    assert thp["transparent_hugepage/enabled"]["recommended"] == "madvise"


def test_a_single_user_postgres_is_no_running_server(pg_factory, tmp_path):
    """`postgres --single` (single-user maintenance; initdb's bootstrap runs `--boot`) holds
    no shared memory for others and accepts no connections: check does not size it or ask for
    its data directory, and sizes the stopped cluster it works on instead."""
    import subprocess
    import time
    from pathlib import Path
    c = pg_factory({"shared_buffers": "64MB"})
    p = subprocess.Popen(["runuser", "-u", "postgres", "--", f"{c.bindir}/postgres", "--single",
                          "-D", c.datadir, "postgres"], stdin=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        single = None
        while single is None and time.time() < deadline:
            for d in Path("/proc").iterdir():
                if d.name.isdigit() and (d / "comm").exists():
                    try:
                        args = (d / "cmdline").read_bytes().split(b"\0")
                    except OSError:
                        continue
                    if b"--single" in args and c.datadir.encode() in args:
                        single = int(d.name)
            time.sleep(0.1)
        assert single, "postgres --single did not start"
        report, r = check_json("--db", "postgres", "--pgdata", c.datadir)
        assert r.returncode in (0, 1), r.stdout + r.stderr
        assert not [i for i in report["instances"] if i["pid"] == single], report["instances"]
        assert report["errors"] == [], report["errors"]
        i = instance(report, c.datadir)
        assert not i["running"] and i["demand"]["pages"]["2048"] > 0
    finally:
        p.stdin.close()
        p.wait(timeout=30)
