"""MariaDB handed a careless configuration and a wrong DSN: an option file with a `[client]`
password and two `[mysqld]` sections, and one DSN that is wrong beside a server that is fine.
The change lands where the server reads it, nothing shows a password, and one bad instance
costs nothing of the report on the others."""

import json
import os
import time
from pathlib import Path

import pytest

from support import run_cli

pytestmark = [pytest.mark.integration, pytest.mark.live]

SECRET = "ClientPw5839"


def test_two_mysqld_sections_and_a_client_password(my_factory, knobs, tmp_path):
    """The second [mysqld] section's large_pages = OFF is the one the server reads: apply
    changes that line (it changed the first, overridden one, failed its read-back and printed
    the whole file, password included, in its error), the server restarts on huge pages, and
    rollback puts the file back byte for byte. No output holds the password."""
    m = my_factory({"large_pages": "OFF"})
    with open(m.cnf, "a") as f:
        f.write(f"\n[client]\nuser = root\npassword = {SECRET}\n\n[mysqld]\nlarge_pages = OFF\n")
    m.start()
    cnf = Path(m.cnf).read_bytes()
    j, root = tmp_path / "journal", tmp_path / "root"
    root.mkdir()
    r = run_cli("apply", "--db", "mysql", "--instance", m.datadir, "--restart", "--yes",
                "--json", "--journal-dir", str(j), "--persist-root", str(root), timeout=600)
    out = r.stdout + r.stderr
    assert SECRET not in out
    assert r.returncode == 0, out
    assert json.loads(r.stdout)["status"] == "ok"
    text = Path(m.cnf).read_text()
    first, second = text.split("[mysqld]")[1], text.split("[mysqld]")[-1]
    assert "large_pages = ON" in second and "large_pages = OFF" in first
    assert f"password = {SECRET}" in text  # the client's lines untouched
    assert m.sql("SELECT @@large_pages")[0][0] in (1, "1", "ON")
    assert not any(SECRET.encode() in p.read_bytes() for p in j.glob("*.jsonl"))
    r = run_cli("rollback", "--yes", "--journal-dir", str(j), timeout=600)
    assert r.returncode == 0 and SECRET not in r.stdout + r.stderr, r.stdout + r.stderr
    assert Path(m.cnf).read_bytes() == cnf


def test_one_wrong_dsn_costs_no_other_instance(my_factory):
    """A DSN with a wrong password, or a port that is no port: its own error line (exit 2),
    and every MariaDB server still in the report and the plan."""
    m = my_factory()
    m.start()
    base = json.loads(run_cli("check", "--db", "mysql", "--json").stdout)
    ids = {i["id"] for i in base["instances"]}
    assert f"mysql:{m.port}" in ids
    for dsn in (f"mysql://root:Wr0ng{SECRET}@127.0.0.1:{m.port}/",
                f"mysql://root:{SECRET}@127.0.0.1:99999/",
                f"mysql://root:{SECRET}@127.0.0.1:notaport/"):
        r = run_cli("check", "--db", "mysql", "--json", "--dsn", dsn)
        assert r.returncode == 2 and SECRET not in r.stdout + r.stderr, r.stderr
        err = r.stderr.strip().splitlines()
        assert len(err) == 1 and "discovery failed" not in err[0], err
        report = json.loads(r.stdout)
        assert ids <= {i["id"] for i in report["instances"]}, (dsn, report["errors"])
        planned = {p["instance"] for p in report["plan"]["placements"]}
        assert ids <= planned


def _age_s(pid: int) -> float:
    """Seconds since the process started (proc(5): starttime, field 22, in clock ticks since
    boot)."""
    start = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19])
    return float(open("/proc/uptime").read().split()[0]) - start / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("broken", ["bogus_variable = 1", "innodb_buffer_pool_size = lots"])
def test_option_file_broken_after_start_is_never_stopped(my_factory, knobs, tmp_path, broken):
    """The option file breaks while the server runs: check says so (crit, exit 2), apply
    leaves it out, and the restart action refuses before it stops anything."""
    from hpadvise.changes.actions import NotStopped
    from hpadvise.plugins.mysql.actions import MyRestart
    m = my_factory()
    m.start()
    pid = m.pid
    # check takes a file written within half a second of the server's start for one written
    # as it started (by what started it), not for a change since; MariaDB can be ready sooner
    # than that (seen on a freshly started machine), so the edit comes a second after the
    # process started (its start time in /proc/PID/stat), as a user's does
    while _age_s(pid) < 1.0:
        time.sleep(0.05)
    with open(m.cnf, "a") as f:
        f.write(broken + "\n")
    r = run_cli("check", "--db", "mysql", "--json")
    assert r.returncode == 2, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert f"mysql:{m.port}" in line and "would not start again" in line
    report = json.loads(r.stdout)
    assert any(f["code"] == "my.config.broken" and f["severity"] == "crit"
               for f in report["findings"] if f["instance"] == f"mysql:{m.port}")
    r = run_cli("apply", "--db", "mysql", "--instance", m.datadir, "--restart", "--yes",
                "--journal-dir", str(tmp_path / "j"))
    assert r.returncode == 2 and "nothing can be planned" in r.stderr, r.stderr
    a = MyRestart(engine="mysql", instance=f"mysql:{m.port}", datadir=m.datadir,
                  socket=m.socket, pid=pid, argv=m.argv, cwd="/", owner="mysql",
                  log_error=m.log, supervisor=None)
    with pytest.raises(NotStopped, match="would not start again"):
        a.set(True)
    assert m.pid == pid and m.ready()
