"""A cluster stopped between applies, on this real kernel with real throwaway clusters: the
pool keeps what its next start takes (the command line of its last start, and at least what
the apply that planned it recorded), and rollback never starts a server its operator stopped.
Pools and THP are restored by the `knobs` fixture even when a test fails."""

import json
import os
from pathlib import Path

import pytest

from support import check_json, host_state, instance, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.live]

BUFFERS = "-c shared_buffers=1GB"  # what A's operator starts it with, over its files' 128MB
SOURCE = "the command line of its last start (postmaster.opts)"


@pytest.fixture
def dirs(tmp_path):
    j, p = tmp_path / "journal", tmp_path / "root"
    p.mkdir()
    return j, p


@pytest.fixture
def two(pg_factory):
    """A started with `pg_ctl -o "-c shared_buffers=1GB" start`, B as its files say."""
    a = pg_factory({"shared_buffers": "128MB", "huge_pages": "try"})
    b = pg_factory({"shared_buffers": "128MB", "huge_pages": "try"})
    start(a, BUFFERS)
    b.start()
    return a, b


def start(c, opts):
    r = c._run([f"{c.bindir}/pg_ctl", "-D", c.datadir, "-l", c.log, "-w", "-t", "120",
                "-o", opts, "start"])
    assert r.returncode == 0, r.stderr + c.logtail()


def pages(c) -> int:
    return int(c.psql("SHOW shared_memory_size_in_huge_pages"))


def apply(c, j, p, *extra):
    r = run_cli("apply", "--db", "postgres", "--instance", str(c.port), "--yes", "--json",
                "--journal-dir", str(j), "--persist-root", str(p), *extra)
    assert r.returncode == 0, r.stderr + r.stdout
    return json.loads(r.stdout)


def rollback(j, jid):
    r = run_cli("rollback", jid, "--yes", "--journal-dir", str(j))
    assert r.returncode == 0, r.stderr + r.stdout
    return r.stdout


def pool_of(out) -> dict:
    [pool] = [ch for ch in out["changes"] if ch["kind"] == "pool"]
    return pool


def check(j):
    report, r = check_json(env={"HPADVISE_JOURNAL_DIR": str(j)})
    assert r.returncode in (0, 1), r.stderr
    return report


def auto_conf(c) -> bytes:
    return Path(f"{c.datadir}/postgresql.auto.conf").read_bytes()


def test_stopped_between_applies_and_rolled_back_stopped(two, knobs, dirs):
    a, b = two
    j, p = dirs
    need_a, need_b = pages(a), pages(b)
    before, before_b = host_state(a, p), auto_conf(b)

    out_a = apply(a, j, p, "--restart")
    assert out_a["status"] == "ok"
    assert pool_of(out_a)["after"] >= need_a
    assert a.psql("SHOW huge_pages") == "on" and pages(a) == need_a  # pg_ctl restart: 1GB
    a.stop("fast")

    # stopped, A is found from the journal and counted with its last start's command line
    ia = instance(check(j), a.datadir)
    assert not ia["running"] and ia["demand"]["pages"]["2048"] == need_a
    assert ia["settings"]["shared_buffers"] == "1GB"
    assert ia["settings"]["sources"]["shared_buffers"] == SOURCE
    files = int(a.postgres_C("shared_memory_size_in_huge_pages"))  # its files alone
    assert files == need_b < need_a

    # B's apply keeps A's pages in the pool
    out_b = apply(b, j, p, "--restart")
    pool = pool_of(out_b)
    assert pool["before"] == pool_of(out_a)["after"]
    assert pool["after"] >= need_a + need_b, pool["why"]  # A by its files alone: 146
    assert f"postgres:{a.datadir}" in pool["why"]

    # A starts again on huge pages, as its operator starts it, beside B on its own
    start(a, BUFFERS)
    assert a.psql("SHOW huge_pages") == "on" and pages(a) == need_a
    report = check(j)
    for c in (a, b):
        i = instance(report, c.datadir)
        assert i["backing"] == "hugetlb" and i["backing_page_kb"] == 2048, i

    # both stopped for maintenance: rolling back both applies starts neither
    a.stop("fast")
    b.stop("fast")
    r = run_cli("rollback", out_b["journal"], "--dry-run", "--journal-dir", str(j))
    assert f"postgres:{b.port} is stopped: its restored settings take effect at its next " \
           "start" in r.stdout, r.stdout
    said = rollback(j, out_b["journal"]) + rollback(j, out_a["journal"])
    for c in (a, b):
        assert f"postgres:{c.port} is stopped: its restored settings take effect at its " \
               "next start" in said, said
        assert not c.running()
    assert host_state(a, p) == before and auto_conf(b) == before_b


def test_a_stopped_cluster_keeps_what_the_active_apply_recorded(two, knobs, dirs):
    """Its files say less than the apply that planned it counted (here: its last start's
    command line is gone): the pool keeps the recorded pages, and the plan says why."""
    a, b = two
    j, p = dirs
    need_a, need_b = pages(a), pages(b)
    before = host_state(a, p)
    out_a = apply(a, j, p, "--restart")
    jid = out_a["journal"]
    a.stop("fast")
    opts = f"{a.datadir}/postmaster.opts"
    os.rename(opts, f"{opts}.aside")
    try:
        report = check(j)
        ia = instance(report, a.datadir)
        assert ia["demand"]["pages"]["2048"] == need_b  # its files: 128MB
        [place] = [x for x in report["plan"]["placements"] if x["instance"] == ia["id"]]
        assert (place["status"], place["pages"], place["recorded_by"],
                place["configured_pages"]) == ("kept", need_a, jid, need_b), place
        why = (f"kept for postgres:{a.datadir}: the active apply {jid} recorded {need_a} "
               f"pages; its files say {need_b}")
        r = run_cli("apply", "--db", "postgres", "--instance", str(b.port), "--dry-run",
                    "--json", "--journal-dir", str(j))
        assert r.returncode == 0, r.stderr
        pool = pool_of(json.loads(r.stdout))
        assert pool["after"] >= need_a + need_b, pool["why"]
        assert why in pool["why"], pool
    finally:
        os.rename(f"{opts}.aside", opts)
    assert f"postgres:{a.port} is stopped" in rollback(j, jid)
    assert not a.running() and b.running()
    assert host_state(a, p) == before
