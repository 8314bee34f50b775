"""Bad input against real clusters: one clear line, exit 2, the rest of the report still made."""

import os
import shutil

import pytest

from support import check_json, run_cli

pytestmark = pytest.mark.integration


def test_malformed_size_names_file_and_line(pg_factory):
    c = pg_factory()
    c.configure({"shared_buffers": "12XB"})
    report, r = check_json("--pgdata", c.datadir)
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "shared_buffers" in err[0] and "12XB" in err[0]
    assert "postgresql.conf:" in err[0]
    assert report["host"]["pools"], "the rest of the report is still produced"


def test_syntax_error_in_postgresql_conf(pg_factory):
    c = pg_factory()
    with open(f"{c.datadir}/postgresql.conf", "a") as f:
        f.write("this is = = not valid\n")
    _, r = check_json("--pgdata", c.datadir)
    assert r.returncode == 2 and "syntax error" in r.stderr


def test_include_in_auto_conf_and_conf_d(pg_factory):
    c = pg_factory({"shared_buffers": "64MB", "include_dir": "'conf.d'"})
    os.makedirs(f"{c.datadir}/conf.d")
    with open(f"{c.datadir}/conf.d/mem.conf", "w") as f:
        f.write("shared_buffers = 300MB\n")
    shutil.chown(f"{c.datadir}/conf.d/mem.conf", "postgres")
    want = int(c.postgres_C("shared_memory_size_in_huge_pages"))
    report, r = check_json("--pgdata", c.datadir)
    assert r.returncode == 0, r.stderr
    i = next(i for i in report["instances"] if i["label"] == c.datadir)
    assert i["settings"]["shared_buffers"] == "300MB"
    assert i["demand"]["pages"]["2048"] == want


def test_data_directory_without_permission(pg_factory):
    c = pg_factory()
    _, r = check_json("--pgdata", c.datadir, user="nobody")
    assert r.returncode == 2
    assert "permission denied" in r.stderr and c.datadir in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_not_a_data_directory(tmp_path):
    _, r = check_json("--pgdata", str(tmp_path))
    assert r.returncode == 2 and "not a PostgreSQL data directory" in r.stderr
    _, r = check_json("--pgdata", str(tmp_path / "nope"))
    assert r.returncode == 2 and "no such directory" in r.stderr


def test_dsn_that_does_not_connect_never_shows_the_password(pg_factory):
    c = pg_factory({"password_encryption": "'scram-sha-256'"})
    with open(f"{c.datadir}/pg_hba.conf", "w") as f:
        f.write("local all postgres trust\nlocal all all scram-sha-256\n")
    c.start()
    c.psql("CREATE ROLE app LOGIN PASSWORD 'right-pw'")
    secret = "Wr0ngS3cret"
    dsns = [f"postgresql://app:{secret}@/postgres?host={c.tmp}&port={c.port}",
            f"host={c.tmp} port={c.port} user=app password={secret} dbname=postgres",
            f"postgresql://app:{secret}@127.0.0.1:1/postgres"]
    for dsn in dsns:
        r = run_cli("check", "--dsn", dsn)
        out = r.stdout + r.stderr
        assert r.returncode == 2, out[-500:]
        assert secret not in out
        assert "cannot connect" in r.stderr and len(r.stderr.strip().splitlines()) == 1
        assert "Instances" in r.stdout  # the report is still produced
        report, r = check_json("--dsn", dsn)
        assert secret not in r.stdout + r.stderr and r.returncode == 2
    # the right password connects, and the password is still not shown
    ok = f"postgresql://app:right-pw@/postgres?host={c.tmp}&port={c.port}"
    report, r = check_json("--dsn", ok)
    assert r.returncode == 0, r.stderr
    assert "right-pw" not in r.stdout + r.stderr


def test_apply_leaves_out_an_instance_it_cannot_plan(pg_factory):
    """Two clusters selected, one of them unplannable (no connection, and its postgresql.conf
    broken since it started): apply names it, leaves it out, and plans the other; with only
    the broken one selected there is nothing to plan, said in one line."""
    import json
    good = pg_factory({"shared_buffers": "64MB", "huge_pages": "try"})
    good.start()
    bad = pg_factory({"shared_buffers": "64MB"})
    with open(f"{bad.datadir}/pg_hba.conf", "w") as f:
        f.write("local all all reject\n")  # check falls back to reading its files
    bad.start()
    with open(f"{bad.datadir}/postgresql.conf", "a") as f:
        f.write("shared_buffers = 'lots'\n")
    both = ["--instance", str(good.port), "--instance", str(bad.port)]
    r = run_cli("apply", "--db", "postgres", *both, "--dry-run", "--json", "--restart")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    [n] = [n for n in plan["notices"] if "left out" in n]
    assert f"postgres:{bad.port} left out" in n and "shared_buffers" in n
    touched = {c["instance"] for c in plan["changes"] if c["instance"]}
    assert touched == {f"postgres:{good.port}"}, plan["changes"]
    r = run_cli("apply", "--db", "postgres", "--instance", str(bad.port), "--dry-run")
    assert r.returncode == 2 and "nothing can be planned" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
