"""Where a PostgreSQL setting comes from decides what apply can do about it, on real clusters:
huge_pages on the postmaster's command line (off: nothing planned, nothing restarted; try:
pages and a restart, the setting itself left where it is and said), and from ALTER SYSTEM
(changed there)."""

import json

import pytest

from support import check_json, instance, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.live]


def start_with(c, *opts: str) -> None:
    """Start a cluster as `pg_ctl -o '-c ...'` does: the options land on the postmaster's
    command line (and in postmaster.opts)."""
    r = c._run([f"{c.bindir}/pg_ctl", "-D", c.datadir, "-l", c.log, "-w", "-o",
                " ".join(opts), "start"])
    assert r.returncode == 0, r.stderr + c.logtail()


@pytest.fixture
def dirs(tmp_path):
    j, p = tmp_path / "journal", tmp_path / "root"
    p.mkdir()
    return j, p


def apply(c, j, p, *extra):
    return run_cli("apply", "--db", "postgres", "--instance", c.datadir, "--yes", "--json",
                   "--journal-dir", str(j), "--persist-root", str(p), *extra)


def test_off_on_the_command_line_plans_nothing(pg_factory, knobs, dirs):
    j, p = dirs
    knobs.pool(2048, 0)
    c = pg_factory({"shared_buffers": "64MB"})
    start_with(c, "-c huge_pages=off")
    pid = c.pid
    report, r = check_json("--db", "postgres")
    assert r.returncode == 0, r.stderr
    i = instance(report, c.datadir)
    src = i["settings"]["sources"]["huge_pages"]
    assert "command line" in src and "postmaster.opts" in src, src
    placed = {x["instance"]: x for x in report["plan"]["placements"]}[i["id"]]
    assert placed["status"] == "held_back" and "command line" in placed["reason"]
    assert not [x for x in report["plan"]["changes"] if x["instance"] == i["id"]]
    assert any(f["code"] == "pg.setting.elsewhere" for f in report["findings"]
               if f["instance"] == i["id"])
    r = apply(c, j, p, "--restart")
    assert r.returncode == 0 and json.loads(r.stdout)["status"] == "nothing", r.stdout
    assert c.pid == pid  # not restarted


def test_try_on_the_command_line_gets_its_pages_and_the_setting_is_said(pg_factory, knobs,
                                                                        dirs):
    j, p = dirs
    knobs.pool(2048, 0)
    c = pg_factory({"shared_buffers": "64MB"})
    start_with(c, "-c huge_pages=try")
    r = apply(c, j, p, "--restart")
    assert r.returncode == 0, r.stderr + r.stdout
    out = json.loads(r.stdout)
    assert out["status"] == "ok"
    kinds = {x["kind"] for x in out["changes"]}
    assert "pool" in kinds and "pg_restart" in kinds and "pg_setting" not in kinds, kinds
    [note] = [n for n in out["notices"] if "is not set by apply" in n]
    assert "huge_pages = on" in note and "command line" in note
    report, _ = check_json("--db", "postgres")
    i = instance(report, c.datadir)
    assert i["backing"] == "hugetlb" and c.psql("SHOW huge_pages") == "try"
    assert run_cli("rollback", "--yes", "--journal-dir", str(j)).returncode == 0


def test_alter_system_is_changed_where_it_is(pg_factory, knobs, dirs):
    j, p = dirs
    knobs.pool(2048, 0)
    c = pg_factory({"shared_buffers": "64MB"})
    c.start()
    c.psql("ALTER SYSTEM SET huge_pages = 'off'")
    c.stop("fast")
    c.start()
    report, _ = check_json("--db", "postgres")
    i = instance(report, c.datadir)
    assert i["settings"]["sources"]["huge_pages"].startswith(
        f"ALTER SYSTEM ({c.datadir}/postgresql.auto.conf:")
    assert {x["instance"]: x for x in report["plan"]["placements"]}[i["id"]]["status"] == "pool"
    r = apply(c, j, p, "--restart")
    assert r.returncode == 0, r.stderr + r.stdout
    assert c.psql("SHOW huge_pages") == "on"
    assert run_cli("rollback", "--yes", "--journal-dir", str(j)).returncode == 0
    assert c.psql("SHOW huge_pages") == "off"


def test_mariadb_option_in_an_included_file_is_changed_there(my_factory, knobs, dirs):
    """large_pages = OFF in a file the server's option file !includes: check names that file
    and line as the source, apply changes the line there (where it wins), reads every option
    file back as the server will, and the server restarts on huge pages."""
    from pathlib import Path
    j, p = dirs
    knobs.pool(2048, 0)
    m = my_factory()
    inc = Path(m.tmp) / "included.cnf"
    inc.write_text("[mysqld]\nlarge_pages = OFF\n")
    with open(m.cnf, "a") as f:
        f.write(f"!include {inc}\n")
    m.start()
    report, r = check_json("--db", "mysql")
    i = next(x for x in report["instances"] if x["id"] == f"mysql:{m.port}")
    assert i["settings"]["sources"]["large_pages"] == f"{inc}:2 (large_pages = OFF)"
    main = Path(m.cnf).read_bytes()
    r = run_cli("apply", "--db", "mysql", "--instance", m.datadir, "--restart", "--yes",
                "--json", "--journal-dir", str(j), "--persist-root", str(p), timeout=600)
    assert r.returncode == 0, r.stderr + r.stdout
    assert inc.read_text() == "[mysqld]\nlarge_pages = ON\n" and Path(m.cnf).read_bytes() == main
    assert m.sql("SELECT @@large_pages")[0][0] in (1, "1", "ON")
    assert run_cli("rollback", "--yes", "--journal-dir", str(j), timeout=600).returncode == 0
    assert inc.read_text() == "[mysqld]\nlarge_pages = OFF\n"


def test_mariadb_large_pages_off_on_its_command_line_plans_nothing(knobs, dirs):
    from hpadvise.plugins.mysql.validate.bench import ScratchMaria

    class Started(ScratchMaria):  # started with --skip-large-pages after its option file
        @property
        def argv(self):
            return super().argv + ["--skip-large-pages"]
    j, p = dirs
    knobs.pool(2048, 0)
    m = Started()
    try:
        m.start()
        pid = m.pid
        report, _ = check_json("--db", "mysql")
        i = next(x for x in report["instances"] if x["id"] == f"mysql:{m.port}")
        assert i["settings"]["sources"]["large_pages"].startswith("the server's command line")
        placed = {x["instance"]: x for x in report["plan"]["placements"]}[i["id"]]
        assert placed["status"] == "held_back" and "command line" in placed["reason"]
        assert any(f["code"] == "my.setting.elsewhere" for f in report["findings"]
                   if f["instance"] == i["id"])
        r = run_cli("apply", "--db", "mysql", "--instance", m.datadir, "--restart", "--yes",
                    "--json", "--journal-dir", str(j), "--persist-root", str(p))
        assert r.returncode == 0 and json.loads(r.stdout)["status"] == "nothing", r.stdout
        assert m.pid == pid
    finally:
        m.destroy()
