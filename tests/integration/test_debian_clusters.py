"""PostgreSQL as Debian's and Ubuntu's packaging run it, each in a root of its own: the
cluster made by pg_createcluster (configuration in /etc/postgresql/V/NAME, settings in its
conf.d, data in /var/lib/postgresql/V/NAME) and started by pg_ctlcluster, in the foreground
as Debian's containers run it (postgres -c config_file, no -D) or as a daemon as its packaging
does (pg_ctl -D with that -c config_file). check reads the data directory from that file and
the postmaster's working directory, and each setting's source from conf.d; apply plans ALTER
SYSTEM in the data directory, in the root; rollback leaves the root's files as they were.
PostgreSQL 14, from Ubuntu 22.04 (no Debian suite ships it), cannot count its own huge pages:
check sizes it from its shared mapping, and on huge pages it takes no more than that."""

import sys
from pathlib import Path

import pytest

from roots_procs import held_pages
from roots_debian import DebianCluster
from support import check_json, run_cli

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "field"))

import servers  # noqa: E402  (the field's pg_ctlcluster daemon, shared with its capture)
from integration.test_own_roots import (_apply_and_restart, _kept, _mine,  # noqa: E402
                                        _rolled_back, journal)  # noqa: F401  (its fixture)

pytestmark = [pytest.mark.integration, pytest.mark.live]


@pytest.mark.parametrize("daemon", [False, True], ids=["foreground", "daemon"])
def test_postgres_17_started_by_pg_ctlcluster(knobs, journal, root_lab, daemon):
    """Debian's ways: `pg_ctlcluster --foreground 17 NAME start`, as its containers run it,
    execs postgres with -c config_file and no -D; `pg_ctlcluster 17 NAME start`, as its
    packaging runs it, has pg_ctl start it as a daemon with -D and that -c config_file. The
    data directory is that file's data_directory, and the postmaster's working directory."""
    s = root_lab("postgres", {"shared_buffers": "256MB", "huge_pages": "try"},
                 cls=servers._Daemon if daemon else DebianCluster)
    s.start()
    argv = Path(f"/proc/{s.pid}/cmdline").read_text().split("\0")
    assert ("-D" in argv) == daemon and any("config_file=" in a for a in argv), argv
    report, _ = check_json("--db", "postgres")
    i = _mine(report, s)
    assert i["settings"]["data_directory"] == s.datadir
    assert i["version"].startswith("17."), i["version"]
    assert i["owner"] == "postgres"
    assert i["settings"]["sources"]["shared_buffers"].startswith(f"{s.etc}/conf.d/hplab.conf:")
    own = int(s.sql("show shared_memory_size_in_huge_pages").strip())
    assert i["demand"]["pages"]["2048"] == own and i["demand"]["exact"]
    before = _kept(s, s.etc, s.datadir + "/postgresql.auto.conf")
    r = run_cli("apply", "--db", "postgres", "--instance", i["id"], "--yes",
                "--journal-dir", str(journal), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "None" not in r.stdout and "?" not in r.stdout, r.stdout
    assert f"restart needed: {i['id']} takes its huge pages" in r.stdout, r.stdout
    assert f"-D {s.datadir}" in r.stdout  # the restart advice names its real directory
    assert "huge_pages = 'on'" in s.host(f"{s.datadir}/postgresql.auto.conf").read_text()
    _rolled_back(s, journal, before)


def test_postgres_14_from_ubuntu_2204_as_its_packaging_starts_it(knobs, journal, root_lab):
    """`pg_ctlcluster 14 NAME start` in an Ubuntu 22.04 root: read as Debian's are; sized from
    its shared mapping (14 has no shared_memory_size_in_huge_pages), which covers the huge
    pages it takes after apply and a restart, within 3% above them."""
    s = root_lab("postgres", {"shared_buffers": "256MB", "huge_pages": "try"},
                 cls=servers._Daemon, suite="jammy")
    s.start()
    report, _ = check_json("--db", "postgres")
    i = _mine(report, s)
    assert i["version"].startswith("14.") and i["owner"] == "postgres", i
    assert i["settings"]["data_directory"] == s.datadir, i["settings"]
    assert i["settings"]["sources"]["shared_buffers"].startswith(f"{s.etc}/conf.d/hplab.conf:")
    need = i["demand"]["pages"]["2048"]
    before = _kept(s, s.etc, s.datadir + "/postgresql.auto.conf")
    after = _mine(_apply_and_restart(s, i["id"], journal), s)
    assert after["backing"] == "hugetlb" and after["version"].startswith("14."), after
    held = held_pages(s.pid)
    assert held <= need <= held * 1.03, (need, held, i["demand"])
    _rolled_back(s, journal, before)
