"""Servers as the official images run them, each in its own root. MySQL 9.7: the entrypoint
ends in `exec mysqld` with no argument at all, so every option comes from /etc/my.cnf and the
conf.d directory it includes, and the root password the image was given stays in the
server's environment. check finds it and names the conf.d file as the source of its
settings; apply plans large_pages in that file, changes nothing outside the root but the
host's pools and restarts nothing; restarted as its runtime would, it runs on huge pages;
rollback leaves the root's files as they were; the password appears in no output and in no
snapshot. PostgreSQL 17: `exec postgres` with no argument, its data directory only in
PGDATA."""

import json
import sys
from pathlib import Path

import pytest

from support import check_json, run_cli

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "field"))

import servers  # noqa: E402  (the field's PostgreSQL started as its image starts it)
import servers_my  # noqa: E402  (the field's image files and server, shared with its capture)
from integration.test_own_roots import (_apply_and_restart, _kept, _mine,  # noqa: E402
                                        _rolled_back, journal)  # noqa: F401  (its fixture)

pytestmark = [pytest.mark.integration, pytest.mark.live]


def test_mysql_97_as_the_official_image_runs_it(knobs, journal, root_lab, tmp_path):
    s = root_lab("mysql", [], cls=servers_my._RootMy)
    undo: list = []
    try:
        servers_my._image_files(s, undo)
        knobs.pool(2048, 0)
        s.start()
        argv = Path(f"/proc/{s.pid}/cmdline").read_text().split("\0")
        assert [a for a in argv if a] == ["mysqld"], argv  # no option on its command line
        # the password is really in the server's environment, as the image leaves it
        assert servers_my.IMAGE_SECRET in Path(f"/proc/{s.pid}/environ").read_text()
        report, r = check_json("--db", "mysql")
        i = _mine(report, s)
        assert i["settings"]["data_directory"].rstrip("/") == s.datadir
        assert i["version"].startswith("9.7.") and i["owner"] == "mysql", i
        src = i["settings"]["sources"]
        assert "/etc/mysql/conf.d/hplab.cnf" in src["innodb_buffer_pool_size"], src
        before = _kept(s, "/etc/mysql", "/etc/my.cnf", s.dir, skip=s.datadir)
        r = run_cli("apply", "--db", "mysql", "--instance", i["id"], "--dry-run", "--json")
        assert r.returncode == 0, r.stderr
        files = [c["target"] for c in json.loads(r.stdout)["changes"]
                 if c["kind"] == "my_option"]
        assert files and all("/etc/mysql/conf.d/hplab.cnf" in f for f in files), files
        outputs = json.dumps(report) + r.stdout + r.stderr
        snap = tmp_path / "snap"  # a snapshot that keeps environments keeps none of it
        r = run_cli("snapshot", "--with-environ", str(snap), timeout=300)
        assert r.returncode == 0, r.stderr
        held = [str(f) for f in snap.rglob("*") if f.is_file() and not f.is_symlink()
                and servers_my.IMAGE_SECRET.encode() in f.read_bytes()]
        assert not held, held
        after = _mine(_apply_and_restart(s, i["id"], journal), s)
        assert after["backing"] == "hugetlb", after
        r = _rolled_back(s, journal, before)
        assert servers_my.IMAGE_SECRET not in outputs + r.stdout + r.stderr
    finally:
        s.destroy()
        for f in reversed(undo):
            f()


def test_postgres_17_as_the_official_image_runs_it(knobs, journal, root_lab):
    """The official postgres image ends in `exec postgres` with no argument: the data
    directory is only PGDATA in the server's environment (and its working directory). check
    reads it from there and sizes the server by its own count; apply plans ALTER SYSTEM in
    that data directory, in the root; rollback gives the file back and leaves the root as it
    was."""
    s = root_lab("postgres", {"shared_buffers": "512MB", "huge_pages": "try"},
                 cls=servers._RootPg)
    s.how = "pgdata"
    knobs.pool(2048, 0)
    s.start()
    argv = [a for a in Path(f"/proc/{s.pid}/cmdline").read_text().split("\0") if a]
    assert len(argv) == 1 and argv[0].endswith("/postgres"), argv  # no -D, no option
    assert f"PGDATA={s.datadir}" in Path(f"/proc/{s.pid}/environ").read_text().split("\0")
    report, _ = check_json("--db", "postgres")
    i = _mine(report, s)
    assert i["settings"]["data_directory"].rstrip("/") == s.datadir, i["settings"]
    assert i["version"].startswith("17.") and i["owner"] == "postgres", i
    own = int(s.sql("show shared_memory_size_in_huge_pages").strip())
    assert i["demand"]["pages"]["2048"] == own and i["demand"]["exact"], i["demand"]
    auto = s.host(f"{s.datadir}/postgresql.auto.conf")
    before = _kept(s, s.dir, skip=s.datadir, files=[auto])
    after = _mine(_apply_and_restart(s, i["id"], journal), s)
    assert "huge_pages = 'on'" in auto.read_text()  # its own file, in its root
    assert after["backing"] == "hugetlb", after
    _rolled_back(s, journal, before)
